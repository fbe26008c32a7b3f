package indb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// SyncRoles makes PostgreSQL's roles and databases those of the spec, on
// the primary, as the superuser: every user with its flags and its
// Secret's password, the replication role's password, every database with
// its owner, and the prepared databases with their roles (their default
// users with their Secrets' passwords), schemas, default privileges and
// extensions. A role or database no longer in the spec is left alone. A
// user's Secret that asks for a rotation (v1.AnnotationRotatePassword) gets
// a new password: written to the Secret as next-password first, then set
// in PostgreSQL, then moved to password, the annotation removed.
func (a *Actor) SyncRoles(ctx context.Context, key string) error {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	return partError(act.PartRoles, r.syncRoles(ctx))
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
	for _, user := range slices.Sorted(maps.Keys(pg.Spec.Users)) {
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
	for _, db := range slices.Sorted(maps.Keys(pg.Spec.Databases)) {
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
	out, err := r.storeNext(ctx, s, "", "the new password")
	if err == nil {
		r.log.WithField("secret", s.Name).Info("password rotation started")
	}
	return out, err
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
	out, err := r.storeNext(ctx, s, ru.Role, "the new credentials of rotation "+rot.ID)
	if err == nil {
		r.log.WithField("secret", s.Name).WithField("rotation", rot.ID).WithField("role", ru.Role).Info("scheduled password rotation started")
	}
	return out, err
}

// storeNext writes a new password into the Secret s as the one a
// rotation is setting (next-password), with role as next-username when
// set, and returns the Secret as written; what names it in errors.
func (r *run) storeNext(ctx context.Context, s *corev1.Secret, role, what string) (*corev1.Secret, error) {
	password, err := pgsql.NewPassword(r.random)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	s.Data[cluster.SecretNextPasswordKey] = []byte(password)
	if role != "" {
		s.Data[cluster.SecretNextUsernameKey] = []byte(role)
	}
	out, err := r.kube.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: act.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("secret %s: store %s: %w", s.Name, what, err)
	}
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
	if _, err := r.kube.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: act.FieldManager}); err != nil {
		return fmt.Errorf("secret %s: store the rotated password: %w", s.Name, err)
	}
	r.log.WithField("secret", s.Name).Info("password rotated")
	return nil
}
