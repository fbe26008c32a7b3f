package effects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// PartError is an in-database failure: Part says which work it concerns,
// PartRoles or PartConfig. Errors of SyncRoles and Configure are
// *PartError.
type PartError struct {
	Part string
	Err  error
}

// Parts of the in-database work.
const (
	PartRoles  = "roles"
	PartConfig = "config"
)

func (e *PartError) Error() string { return e.Err.Error() }
func (e *PartError) Unwrap() error { return e.Err }

// member is one pod of a cluster with its Patroni member data.
type member struct {
	pod *corev1.Pod
	patroni.Member
}

// members returns the cluster's pods that run, with their Patroni member
// data, and the primary among them: the one whose member data say it
// leads. A pod without member data is left out.
func (r *run) members(ctx context.Context, pg *v1.Postgresql) (all []member, primary *member, err error) {
	pods, err := r.pods(ctx, pg)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		m, ok := patroni.MemberOf(p.Annotations)
		if !ok {
			continue
		}
		all = append(all, member{pod: p, Member: m})
	}
	slices.SortFunc(all, func(a, b member) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	for i := range all {
		if all[i].IsLeaderRole() {
			primary = &all[i]
		}
	}
	if primary == nil {
		return all, nil, fmt.Errorf("no pod of %s publishes Patroni member data as the primary yet (%w)", r.key, ErrWaiting)
	}
	return all, primary, nil
}

// pods returns the cluster's pods, terminating ones included.
func (r *run) pods(ctx context.Context, pg *v1.Postgresql) ([]*corev1.Pod, error) {
	if r.cache != nil {
		return r.cache.Pods(r.key), nil
	}
	list, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(cluster.Selector(pg.Name)).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	return pods, nil
}

// clusterMembers reads the cluster's resource and its members (members);
// pg is nil, with no error, when the resource is gone.
func (r *run) clusterMembers(ctx context.Context) (pg *v1.Postgresql, all []member, primary *member, err error) {
	if pg, err = r.getCluster(ctx, false); pg == nil || err != nil {
		return nil, nil, nil, err
	}
	all, primary, err = r.members(ctx, pg)
	return pg, all, primary, err
}

// endpoint is where PostgreSQL of m listens, as the superuser; label names
// it in errors ("primary", "pod db-1").
func (m *member) endpoint(label string, passwords []string) (pgsql.Endpoint, error) {
	host, port, err := m.PostgresHostPort()
	if err != nil {
		return pgsql.Endpoint{}, fmt.Errorf("pod %s: %w", m.pod.Name, err)
	}
	return pgsql.Endpoint{Label: label, Host: host, Port: port, User: cluster.SuperuserName, Passwords: passwords}, nil
}

// secret reads a role's Secret from the API: the cache holds no data.
func (r *run) secret(ctx context.Context, pg *v1.Postgresql, role string) (*corev1.Secret, error) {
	name := cluster.SecretName(role, pg.Name)
	s, err := r.kube.CoreV1().Secrets(r.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("secret %s of role %s does not exist yet (%w)", name, role, ErrWaiting)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	return s, nil
}

// passwords are the passwords of a role's Secret: the one it holds, then
// the one a rotation is setting, if any.
func passwords(s *corev1.Secret) []string {
	out := []string{string(s.Data[cluster.SecretPasswordKey])}
	if next, ok := s.Data[cluster.SecretNextPasswordKey]; ok {
		out = append(out, string(next))
	}
	return out
}

// SyncRoles makes PostgreSQL's roles and databases those of the spec, on
// the primary, as the superuser: every user with its flags and its
// Secret's password, the replication role's password, every database with
// its owner, and the prepared databases with their roles (their default
// users with their Secrets' passwords), schemas, default privileges and
// extensions. A role or database no longer in the spec is left alone. A
// user's Secret that asks for a rotation (v1.AnnotationRotatePassword) gets
// a new password: written to the Secret as next-password first, then set
// in PostgreSQL, then moved to password, the annotation removed.
func (e *Effects) SyncRoles(ctx context.Context, key string) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	if err := r.syncRoles(ctx); err != nil {
		return &PartError{Part: PartRoles, Err: err}
	}
	return nil
}

func (r *run) syncRoles(ctx context.Context) error {
	pg, _, primary, err := r.clusterMembers(ctx)
	if pg == nil || err != nil {
		return err
	}
	super, err := r.secret(ctx, pg, cluster.SuperuserName)
	if err != nil {
		return err
	}
	super, err = r.startRotation(ctx, super)
	if err != nil {
		return err
	}
	ep, err := primary.endpoint("primary", passwords(super))
	if err != nil {
		return err
	}
	var d pgsql.Desired
	type pending struct {
		user   string
		secret *corev1.Secret
	}
	rotating := []pending{}
	if _, ok := super.Data[cluster.SecretNextPasswordKey]; ok {
		d.Roles = append(d.Roles, pgsql.Role{Name: cluster.SuperuserName, Flags: []string{"SUPERUSER"},
			Password: string(super.Data[cluster.SecretNextPasswordKey])})
		rotating = append(rotating, pending{cluster.SuperuserName, super})
	}
	standby, err := r.secret(ctx, pg, cluster.ReplicationUserName)
	if err != nil {
		return err
	}
	d.Roles = append(d.Roles, pgsql.Role{Name: cluster.ReplicationUserName, Flags: []string{"REPLICATION"},
		Password: string(standby.Data[cluster.SecretPasswordKey])})
	for _, user := range sortedKeys(pg.Spec.Users) {
		s, err := r.secret(ctx, pg, user)
		if err != nil {
			return err
		}
		if s, err = r.startRotation(ctx, s); err != nil {
			return err
		}
		if s, err = r.startScheduledRotation(ctx, pg, user, s); err != nil {
			return err
		}
		flags := make([]string, 0, len(pg.Spec.Users[user]))
		for _, f := range pg.Spec.Users[user] {
			flags = append(flags, strings.ToUpper(string(f)))
		}
		roles, next := userRoles(user, flags, s)
		d.Roles = append(d.Roles, roles...)
		if next {
			rotating = append(rotating, pending{user, s})
		}
	}
	preparedRoles, preparedDBs, preparedDBsSQL := prepared(&pg.Spec)
	for _, pr := range preparedRoles {
		// A default user logs in with its Secret's password, rotated as a
		// manifest user's is.
		if pr.login {
			s, err := r.secret(ctx, pg, pr.Name)
			if err != nil {
				return err
			}
			if s, err = r.startRotation(ctx, s); err != nil {
				return err
			}
			if s, err = r.startScheduledRotation(ctx, pg, pr.Name, s); err != nil {
				return err
			}
			roles, next := userRoles(pr.Name, pr.Flags, s)
			if next {
				rotating = append(rotating, pending{pr.Name, s})
			}
			d.Roles = append(d.Roles, roles...)
			continue
		}
		d.Roles = append(d.Roles, pr.Role)
	}
	for _, db := range sortedKeys(pg.Spec.Databases) {
		d.Databases = append(d.Databases, pgsql.Database{Name: db, Owner: pg.Spec.Databases[db]})
	}
	d.Databases = append(d.Databases, preparedDBs...)
	d.Prepared = preparedDBsSQL
	if pg.Spec.AnyPoolerEnabled() {
		// The pooler's role logs in with its Secret's password only; its
		// lookup function is installed in every database.
		user := pg.Spec.PoolerUser()
		s, err := r.secret(ctx, pg, user)
		if err != nil {
			return err
		}
		d.Roles = append(d.Roles, pgsql.Role{Name: user, Flags: []string{"LOGIN", "NOSUPERUSER", "NOCREATEDB", "NOCREATEROLE"},
			Password: string(s.Data[cluster.SecretPasswordKey])})
		d.Pooler = &pgsql.Pooler{User: user, Schema: pg.Spec.PoolerSchema()}
	}
	if run := pg.Status.PasswordRotation; run != nil && run.Last != nil && run.Last.FinishedAt == nil {
		d.Drop = run.Last.Drop
	}
	res, err := pgsql.Sync(ctx, ep, d, r.sqlOptions())
	// A rotation is finished for every role PostgreSQL took the new
	// password of, whatever else failed.
	for _, p := range rotating {
		role := secretRole(p.secret)
		if slices.ContainsFunc(res.Errors, func(ie pgsql.ItemError) bool { return ie.Kind == "role" && ie.Name == role }) {
			continue
		}
		if err == nil || len(res.Errors) > 0 {
			if ferr := r.finishRotation(ctx, pg, p.user, p.secret); ferr != nil {
				return ferr
			}
		}
	}
	if len(res.Dropped) > 0 {
		r.log.WithField("roles", res.Dropped).Info("roles of password rotations past their retention dropped")
	}
	for _, ie := range res.NotDropped {
		// zalando leaves such a role too: it owns objects or holds
		// privileges a user must hand over first (REASSIGN OWNED).
		r.log.WithField("role", ie.Name).WithError(ie.Err).Warn("role of a password rotation past its retention not dropped")
	}
	if err != nil {
		return err
	}
	if len(res.Created) > 0 || len(res.Altered) > 0 {
		r.log.WithField("created", res.Created).Debug("roles and databases synced")
	}
	return nil
}

// startRotation writes a new password into a Secret that asks for a
// rotation and has none pending yet, and returns the Secret as written.
func (r *run) startRotation(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	if _, ok := s.Annotations[v1.AnnotationRotatePassword]; !ok {
		return s, nil
	}
	if _, ok := s.Data[cluster.SecretNextPasswordKey]; ok {
		return s, nil
	}
	password, err := pgsql.NewPassword(r.random)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	s.Data[cluster.SecretNextPasswordKey] = []byte(password)
	out, err := r.kube.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("secret %s: store the new password: %w", s.Name, err)
	}
	r.log.WithField("secret", s.Name).Info("password rotation started")
	return out, nil
}

// startScheduledRotation writes the new credentials of the scheduled
// rotation under way (status.passwordRotation.last) into the Secret of
// user, when it rotates user, the Secret has not taken it yet
// (v1.AnnotationPasswordRotated) and none is pending: a new password, and
// the role that gets it (the user itself in place, else the rotation's new
// role) as next-username. It returns the Secret as written.
func (r *run) startScheduledRotation(ctx context.Context, pg *v1.Postgresql, user string, s *corev1.Secret) (*corev1.Secret, error) {
	rot, ru := pg.Status.PasswordRotation.Rotating(user)
	if rot == nil || s.Annotations[v1.AnnotationPasswordRotated] == rot.ID {
		return s, nil
	}
	if _, ok := s.Data[cluster.SecretNextPasswordKey]; ok {
		return s, nil
	}
	password, err := pgsql.NewPassword(r.random)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	s.Data[cluster.SecretNextPasswordKey] = []byte(password)
	s.Data[cluster.SecretNextUsernameKey] = []byte(ru.Role)
	out, err := r.kube.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("secret %s: store the new credentials of rotation %s: %w", s.Name, rot.ID, err)
	}
	r.log.WithField("secret", s.Name).WithField("rotation", rot.ID).WithField("role", ru.Role).Info("scheduled password rotation started")
	return out, nil
}

// secretRole is the role a user's Secret logs in as, or, during a
// rotation that names one, will: its next-username, else its username.
func secretRole(s *corev1.Secret) string {
	if next, ok := s.Data[cluster.SecretNextUsernameKey]; ok {
		return string(next)
	}
	return string(s.Data[cluster.SecretUsernameKey])
}

// userRoles are the roles of user with flags whose Secret is s, and
// whether s has a new password pending: the user with its Secret's
// password when the Secret logs in as the user; else (a rotation gave the
// Secret a role of its own, member of the user) the user with its flags
// and password left as they are, and that role, with the same flags and
// the Secret's password.
func userRoles(user string, flags []string, s *corev1.Secret) (roles []pgsql.Role, next bool) {
	password := string(s.Data[cluster.SecretPasswordKey])
	if p, ok := s.Data[cluster.SecretNextPasswordKey]; ok {
		password, next = string(p), true
	}
	login := secretRole(s)
	if login == "" || login == user {
		return []pgsql.Role{{Name: user, Flags: flags, Password: password}}, next
	}
	return []pgsql.Role{{Name: user, Flags: flags}, {Name: login, Flags: flags, Password: password, MemberOf: user}}, next
}

// finishRotation moves the new password, which PostgreSQL now has, to the
// Secret's password key (and the role named next-username to username)
// and removes the rotation request; a Secret of user that took the
// scheduled rotation under way records it (v1.AnnotationPasswordRotated)
// with the next rotation's date (v1.SecretNextRotationKey).
func (r *run) finishRotation(ctx context.Context, pg *v1.Postgresql, user string, s *corev1.Secret) error {
	s = s.DeepCopy()
	s.Data[cluster.SecretPasswordKey] = s.Data[cluster.SecretNextPasswordKey]
	delete(s.Data, cluster.SecretNextPasswordKey)
	if next, ok := s.Data[cluster.SecretNextUsernameKey]; ok {
		s.Data[cluster.SecretUsernameKey] = next
		delete(s.Data, cluster.SecretNextUsernameKey)
	}
	delete(s.Annotations, v1.AnnotationRotatePassword)
	if rot, _ := pg.Status.PasswordRotation.Rotating(user); rot != nil {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[v1.AnnotationPasswordRotated] = rot.ID
		if next := pg.Status.PasswordRotation.NextRotation; next != nil {
			s.Data[v1.SecretNextRotationKey] = []byte(next.UTC().Format(time.RFC3339))
		}
	}
	if _, err := r.kube.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("secret %s: store the rotated password: %w", s.Name, err)
	}
	r.log.WithField("secret", s.Name).Info("password rotated")
	return nil
}

// Configure makes Patroni's dynamic configuration hold the spec's settings
// (PATCH /config on the primary, only what differs; remove lists
// parameters the spec no longer sets) and checks that every member runs
// them: the value in its postgresql.conf, applied or pending a restart
// that its Patroni reports. It waits (ErrWaiting) while a member has not
// reloaded yet.
func (e *Effects) Configure(ctx context.Context, key string, remove []string) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	if err := r.configure(ctx, remove); err != nil {
		return &PartError{Part: PartConfig, Err: err}
	}
	return nil
}

func (r *run) configure(ctx context.Context, remove []string) error {
	pg, all, primary, err := r.clusterMembers(ctx)
	if pg == nil || err != nil {
		return err
	}
	base, err := primary.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", primary.pod.Name, err)
	}
	dyn := cluster.Dynamic(pg)
	super, err := r.secret(ctx, pg, cluster.SuperuserName)
	if err != nil {
		return err
	}
	// A value PostgreSQL refuses is refused here, before Patroni writes it
	// to every member.
	if len(dyn.Parameters) > 0 {
		ep, err := primary.endpoint("primary", passwords(super))
		if err != nil {
			return err
		}
		params := map[string]string{}
		for k, v := range dyn.Settings[cluster.ConfigPostgreSQL].(map[string]any)[cluster.ConfigParameters].(map[string]any) {
			params[k] = v.(string)
		}
		if err := pgsql.CheckParameters(ctx, ep, params, r.sqlOptions()); err != nil {
			return err
		}
	}
	current, err := r.patroni.Config(ctx, base)
	if err != nil {
		return err
	}
	if patch := patroni.ConfigPatch(current, dyn.Settings, remove); patch != nil {
		if _, err := r.patroni.PatchConfig(ctx, base, patch); err != nil {
			return err
		}
		r.log.WithField("patch", patch).Info("patroni configuration patched")
	}
	if len(dyn.Parameters) == 0 {
		return nil
	}
	if int32(len(all)) < pg.Spec.NumberOfInstances {
		return fmt.Errorf("%d of %d members publish Patroni member data (%w)", len(all), pg.Spec.NumberOfInstances, ErrWaiting)
	}
	want := dyn.Settings[cluster.ConfigPostgreSQL].(map[string]any)[cluster.ConfigParameters].(map[string]any)
	var waiting []string
	for i := range all {
		m := &all[i]
		ep, err := m.endpoint("pod "+m.pod.Name, passwords(super))
		if err != nil {
			return err
		}
		got, err := pgsql.Settings(ctx, ep, dyn.Parameters, r.sqlOptions())
		if err != nil {
			return err
		}
		for _, name := range dyn.Parameters {
			s, value := got[name], want[name].(string)
			written := s.InFile && strings.EqualFold(s.File, value)
			switch {
			case !s.Known:
				return fmt.Errorf("parameter %s: PostgreSQL does not know it (unrecognized configuration parameter)", name)
			case sameSetting(s.Current, value):
			case written && s.Applied:
			case written && s.PendingRestart:
				// pg_file_settings says "setting could not be applied"
				// for these: it takes a restart, which Patroni reports.
				if !m.PendingRestart {
					waiting = append(waiting, fmt.Sprintf("pod %s: %s waits for a restart its Patroni does not report yet", m.pod.Name, name))
				}
			case written && s.Error != "":
				return fmt.Errorf("pod %s: parameter %s = %q: %s", m.pod.Name, name, value, s.Error)
			default:
				waiting = append(waiting, fmt.Sprintf("pod %s: %s is %s, want %s", m.pod.Name, name, s.Current, value))
			}
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("waiting for Patroni to apply the configuration (within loop_wait): %s (%w)", strings.Join(waiting, "; "), ErrWaiting)
	}
	return nil
}

// sameSetting compares a current_setting value with the spec's value as
// PostgreSQL would: case aside, and on/off spelt as true/false or 1/0.
func sameSetting(current, want string) bool {
	if strings.EqualFold(current, want) {
		return true
	}
	norm := func(s string) string {
		switch strings.ToLower(s) {
		case "on", "true", "yes", "1":
			return "on"
		case "off", "false", "no", "0":
			return "off"
		}
		return s
	}
	return norm(current) == norm(want)
}

// RestartMembers restarts pods' PostgreSQL through their Patroni, what is
// pending only (POST /restart with restart_pending): a member with nothing
// pending any more is left alone. The primary's restart is paused for at
// the primary's pooler as a switchover is (switchpause.go), when the status
// records that pause (from and to the primary itself).
func (e *Effects) RestartMembers(ctx context.Context, key string, pods []string) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	// A member restarts whichever is the primary.
	pg, all, primary, err := r.clusterMembers(ctx)
	if pg == nil || err != nil && !errors.Is(err, ErrWaiting) {
		return err
	}
	for _, name := range pods {
		i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == name })
		if i < 0 {
			return fmt.Errorf("pod %s publishes no Patroni member data (%w)", name, ErrWaiting)
		}
		if primary != nil && primary.pod.Name == name {
			err = r.restartPrimary(ctx, pg, &all[i])
		} else {
			err = r.restartMember(ctx, &all[i])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// restartMember restarts one member's PostgreSQL through its Patroni,
// what is pending only.
func (r *run) restartMember(ctx context.Context, m *member) error {
	name := m.pod.Name
	base, err := m.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	err = r.patroni.Restart(ctx, base, true, r.restartTimeout)
	switch {
	case errors.Is(err, patroni.ErrNothingToRestart):
		r.log.WithField("pod", name).Info("nothing pending a restart any more")
	case err != nil:
		return fmt.Errorf("restart pod %s: %w", name, err)
	default:
		r.log.WithField("pod", name).Info("member restarted")
	}
	return nil
}

// Switchover asks the primary's Patroni to hand its role to the pod to
// (POST /switchover); Patroni answers once it is done. Around it
// (switchpause.go): a CHECKPOINT on the primary first, so its shutdown
// checkpoint is short; when the status records a pause of the primary's
// pooler, PAUSE on its pods before, and after, once the new primary takes
// writes and the master Service routes to it, RESUME, which also follows a
// failure or the step's deadline.
func (e *Effects) Switchover(ctx context.Context, key, from, to string) (err error) {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	pg, all, primary, err := r.clusterMembers(ctx)
	switch {
	case pg == nil:
		return err
	case errors.Is(err, ErrWaiting) && r.leftPrimary(ctx, pg, all, from):
		// No member publishes as the primary yet, and from has left
		// the role: it is on its way (a later plan carried this
		// switchover again while Patroni answered the first, and the
		// former primary's pod is already replaced). Asking again would
		// fail, and hold the rollout for a retry, for nothing.
		r.log.WithField("from", from).Info("switchover under way: no longer the primary")
		return nil
	case err != nil:
		return err
	case primary.pod.Name != from:
		// Patroni moved the role already: the rollout goes on.
		return nil
	}
	base, err := primary.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", from, err)
	}
	super, err := r.secret(ctx, pg, cluster.SuperuserName)
	if err != nil {
		return err
	}
	r.checkpoint(ctx, primary, passwords(super))
	began := time.Now()
	paused := r.pausePoolers(ctx, from, to)
	resume := sync.OnceValue(func() error { return r.resumePoolers(ctx, paused, began) })
	defer func() {
		if rerr := resume(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	var cand *member
	if i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == to }); i >= 0 {
		cand = &all[i]
	} else if len(paused) > 0 {
		r.log.WithField("to", to).Warn("the new primary publishes no member data: the pooler is resumed once Patroni answers")
	}
	switching := time.Now()
	answer := make(chan error, 1)
	go func() { answer <- r.patroni.Switchover(ctx, base, from, to) }()
	if len(paused) > 0 && cand != nil {
		// Patroni answers the switchover up to a second after it is
		// done (it looks once a second): the poolers are resumed as
		// soon as the new primary takes writes and the Service routes
		// to it, Patroni's answer or not (awaitSwitch).
		if err := r.awaitSwitch(ctx, pg, cand, passwords(super), answer); err != nil {
			r.log.WithError(err).Warn("resuming the pooler anyway")
		}
		_ = resume()
	}
	if err := <-answer; err != nil {
		return err
	}
	r.log.WithField("from", from).WithField("to", to).WithField("took", time.Since(switching).Round(time.Millisecond)).Info("switched over")
	return nil
}

// leftPrimary reports whether pod has left the primary's role for sure:
// its member data say it does not lead, or it is terminating or gone. A
// pod that publishes no member data (yet) has not.
func (r *run) leftPrimary(ctx context.Context, pg *v1.Postgresql, all []member, pod string) bool {
	if i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == pod }); i >= 0 {
		return !all[i].IsLeaderRole()
	}
	pods, err := r.pods(ctx, pg)
	if err != nil {
		return false
	}
	i := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return p.Name == pod })
	return i < 0 || pods[i].DeletionTimestamp != nil
}

// sqlOptions are the SQL options of a run, counting statements for the
// cluster.
func (r *run) sqlOptions() pgsql.Options {
	o := r.sql
	if r.observeSQL != nil {
		key := r.key
		o.Observe = func(outcome string) { r.observeSQL(key, outcome) }
	}
	return o
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
