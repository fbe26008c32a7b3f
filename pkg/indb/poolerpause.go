package indb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// Bounds of the steps of a switchover around Patroni's (docs/user-guide.md,
// "Switchovers through the pooler").
const (
	// PoolerPauseTimeout bounds PAUSE on the pooler's pods: PgBouncer
	// answers once every server connection was released, which a long
	// transaction (or a session-mode client) may hold. After it pgloop
	// switches anyway: a pooler still pausing holds new queries as a
	// paused one does, and what it could not release fails as it would
	// without a pause.
	PoolerPauseTimeout = 5 * time.Second
	// RouteTimeout bounds the wait, after Patroni answered the
	// switchover, for the new primary to take writes and for the master
	// Service to route to it alone. After it the poolers are resumed
	// anyway: a pause must end.
	RouteTimeout = 10 * time.Second
	// CheckpointTimeout bounds the CHECKPOINT before the switchover; one
	// that does not end in time is left to the shutdown checkpoint.
	CheckpointTimeout = 10 * time.Second
	// poolerAdminTimeout bounds each RESUME (connection included).
	poolerAdminTimeout = 3 * time.Second
	// routePoll paces the look at the route.
	routePoll = 50 * time.Millisecond
)

// poolerAdmins returns the admin consoles of the primary pooler's pods
// that run (an IP, not terminating), and whether each is Ready. It reads
// the pods and the pooler role's Secret from the API: a switchover must
// not miss a pod the cache has not shown yet.
func (r *run) poolerAdmins(ctx context.Context, pg *v1.Postgresql) ([]poolerAdmin, error) {
	list, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(cluster.PoolerSelector(pg.Name, cluster.RoleMaster)).String()})
	if err != nil {
		return nil, fmt.Errorf("list the pooler's pods: %w", err)
	}
	var out []poolerAdmin
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		out = append(out, poolerAdmin{pod: p.Name, ready: podIsReady(p),
			ep: pgsql.BouncerEndpoint("pooler pod "+p.Name, p.Status.PodIP, cluster.PostgresPort, pg.Spec.PoolerUser(), "")})
	}
	if len(out) == 0 {
		return nil, nil
	}
	secret, err := r.secret(ctx, pg, pg.Spec.PoolerUser())
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].ep.Passwords = []string{string(secret.Data[cluster.SecretPasswordKey])}
	}
	return out, nil
}

// poolerAdmin is one pooler pod's admin console.
type poolerAdmin struct {
	pod   string
	ready bool
	ep    pgsql.Endpoint
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// poolerCommand sends command to every admin console at once, each under
// bound, and returns the pods it succeeded on and the errors of the
// others.
func (r *run) poolerCommand(ctx context.Context, admins []poolerAdmin, command string, bound time.Duration) (done []string, errs []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range admins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			err := pgsql.Bouncer(cctx, a.ep, command, min(bound, pgsql.DefaultConnectTimeout))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			done = append(done, a.pod)
		}()
	}
	wg.Wait()
	slices.Sort(done)
	return done, errs
}

// pausePoolers pauses the primary pooler's pods for the switchover from
// from to to, when the resource's status records that pause (the machine
// wrote it before this plan's effects, pkg/fsm/pause.go): read from the
// API, not the cache, which may not show that write yet. It returns the
// pods to resume, nil when there is no pause. Pods that do not answer
// PAUSE within PoolerPauseTimeout are logged, and the switchover goes on.
func (r *run) pausePoolers(ctx context.Context, from, to string) []poolerAdmin {
	pg, err := r.getCluster(ctx, true)
	if err != nil || pg == nil {
		r.log.WithError(err).Warn("not pausing the pooler: the cluster's status could not be read")
		return nil
	}
	if p := pg.Status.PoolerPause; p == nil || p.From != from || p.To != to {
		return nil
	}
	admins, err := r.poolerAdmins(ctx, pg)
	if err != nil {
		r.log.WithError(err).Warn("not pausing the pooler")
		return nil
	}
	began := time.Now()
	done, errs := r.poolerCommand(ctx, admins, pgsql.BouncerPause, PoolerPauseTimeout)
	log := r.log.WithField("pods", strings.Join(done, ",")).WithField("took", time.Since(began).Round(time.Millisecond))
	if len(errs) > 0 {
		log.WithError(errors.Join(errs...)).Warn("pooler pods not paused within the bound: going on anyway")
	} else {
		log.Info("pooler paused")
	}
	// Every pod is resumed, paused or not: one whose PAUSE timed out is
	// still pausing.
	return admins
}

// resumePoolers resumes the pooler's pods, each within
// poolerAdminTimeout, also when ctx has ended (the switchover's deadline):
// a pause must not outlive the switchover. A pod that is not Ready and
// does not answer is logged only; any other failure is returned (the
// machine asks again, pkg/fsm/pause.go).
func (r *run) resumePoolers(ctx context.Context, admins []poolerAdmin, paused time.Time) error {
	if len(admins) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	done, errs := r.poolerCommand(ctx, admins, pgsql.BouncerResume, poolerAdminTimeout)
	var failed []error
	for _, err := range errs {
		notReady := slices.ContainsFunc(admins, func(a poolerAdmin) bool {
			return !a.ready && strings.HasPrefix(err.Error(), a.ep.String()+":")
		})
		if notReady {
			r.log.WithError(err).Info("pooler pod not Ready did not answer RESUME")
			continue
		}
		failed = append(failed, err)
	}
	if len(done) > 0 {
		log := r.log.WithField("pods", strings.Join(done, ","))
		if !paused.IsZero() {
			log = log.WithField("paused", time.Since(paused).Round(time.Millisecond))
		}
		log.Info("pooler resumed")
	}
	if len(failed) > 0 {
		return fmt.Errorf("resume the connection pooler: %w", errors.Join(failed...))
	}
	return nil
}

// ResumePoolers tells every pod of the cluster's primary pooler RESUME:
// the machine asks for it after a switchover that paused them
// (status.poolerPause), until it succeeds. It is idempotent: RESUME of a
// pooler that is not paused succeeds.
func (a *Actor) ResumePoolers(ctx context.Context, key string) error {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	pg, err := r.getCluster(ctx, false)
	if pg == nil || err != nil {
		return err
	}
	admins, err := r.poolerAdmins(ctx, pg)
	if err != nil {
		if isWaiting(err) {
			// No Secret: no pooler ran with it, none is paused.
			return nil
		}
		return err
	}
	return r.resumePoolers(ctx, admins, time.Time{})
}

// awaitSwitch waits until the new primary to takes writes and the master
// Service routes to it alone (awaitRoute), while Patroni's answer to the
// switchover comes on answer: a failed switchover ends the wait at once
// (its error is put back for the caller), a successful one bounds it to
// RouteTimeout from then.
func (r *run) awaitSwitch(ctx context.Context, pg *v1.Postgresql, to *member, superuser []string, answer chan error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	routed := make(chan error, 1)
	began := time.Now()
	go func() { routed <- r.awaitRoute(ctx, pg, to, superuser) }()
	var err error
	select {
	case err = <-routed:
	case perr := <-answer:
		answer <- perr
		if perr != nil {
			cancel()
			<-routed
			return fmt.Errorf("the switchover failed: %w", perr)
		}
		timer := time.NewTimer(RouteTimeout)
		defer timer.Stop()
		select {
		case err = <-routed:
		case <-timer.C:
			cancel()
			err = <-routed
		}
	}
	if err == nil {
		r.log.WithField("took", time.Since(began).Round(time.Millisecond)).Info("the new primary takes writes through the master Service")
	}
	return err
}

// awaitRoute waits until the new primary to takes writes and the master
// Service routes to it alone: what PgBouncer's new server connections
// reach once it is resumed. The Service's ready EndpointSlice addresses
// when it has any; else (a plane whose pod IPs the EndpointSlice
// controller cannot publish) the pods its selector matches that are Ready
// and not terminating, which is what that controller would publish. What
// it cannot see is kube-proxy programming the nodes after the
// EndpointSlice changed (docs/user-guide.md). It ends with ctx.
func (r *run) awaitRoute(ctx context.Context, pg *v1.Postgresql, to *member, superuser []string) error {
	ep, err := to.endpoint("new primary", superuser)
	if err != nil {
		return err
	}
	tick := time.NewTicker(routePoll)
	defer tick.Stop()
	writes, routed := false, ""
	for {
		if !writes {
			writes, err = pgsql.AcceptsWrites(ctx, ep, r.sqlOptions())
		}
		if writes {
			routed, err = r.routesTo(ctx, pg)
			if err == nil && routed == to.pod.Status.PodIP {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("the master Service routes to %q, not only to %s (%s)", routed, to.pod.Name, to.pod.Status.PodIP)
			}
			if !writes {
				err = fmt.Errorf("pod %s does not take writes yet: %w", to.pod.Name, err)
			}
			return err
		case <-tick.C:
		}
	}
}

// routesTo returns the addresses the cluster's master Service routes to,
// joined by ",".
func (r *run) routesTo(ctx context.Context, pg *v1.Postgresql) (string, error) {
	name := cluster.MasterServiceName(pg.Name)
	list, err := r.kube.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return "", fmt.Errorf("list the EndpointSlices of service %s: %w", name, err)
	}
	var addrs []string
	for _, es := range list.Items {
		for _, e := range es.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				addrs = append(addrs, e.Addresses...)
			}
		}
	}
	if len(addrs) == 0 {
		svc, err := r.kube.CoreV1().Services(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get service %s: %w", name, err)
		}
		if len(svc.Spec.Selector) == 0 {
			return "", nil
		}
		pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
		if err != nil {
			return "", fmt.Errorf("list the pods of service %s: %w", name, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil && podIsReady(p) {
				addrs = append(addrs, p.Status.PodIP)
			}
		}
	}
	slices.Sort(addrs)
	return strings.Join(slices.Compact(addrs), ","), nil
}

// checkpoint runs CHECKPOINT on the primary before its switchover, within
// CheckpointTimeout: the shutdown checkpoint that Patroni's demotion waits
// for then has little left to write. A failure is logged only.
func (r *run) checkpoint(ctx context.Context, primary *member, superuser []string) {
	ctx, cancel := context.WithTimeout(ctx, CheckpointTimeout)
	defer cancel()
	ep, err := primary.endpoint("primary", superuser)
	if err == nil {
		began := time.Now()
		if err = pgsql.Checkpoint(ctx, ep, r.sqlOptions()); err == nil {
			r.log.WithField("took", time.Since(began).Round(time.Millisecond)).Debug("checkpoint before the switchover")
			return
		}
	}
	r.log.WithError(err).Warn("checkpoint before the switchover failed; switching over anyway")
}

// restartStillPending asks the member's Patroni (GET /patroni) whether a
// restart is still pending before its pooler is paused for one. The member
// data the plan was made from are Patroni's last publication, a loop
// behind: a plan made just after the restart reads it pending still, and
// pausing the pooler for nothing stalls its clients. When Patroni does not
// answer, the restart goes on: POST /restart asks for what is pending only.
func (r *run) restartStillPending(ctx context.Context, m *member) bool {
	base, err := m.APIBase()
	if err != nil {
		return true
	}
	st, err := r.patroni.Status(ctx, base)
	if err != nil || st.PendingRestart {
		return true
	}
	r.log.WithField("pod", m.pod.Name).Info("nothing pending a restart any more")
	return false
}

// restartPrimary restarts the primary's PostgreSQL (restartMember) with
// the primary pooler's pods paused around it when the status records that
// pause (from and to the primary: pkg/fsm/pause.go): PAUSE, the restart
// (Patroni answers once PostgreSQL runs again), then, once the primary
// takes writes and the master Service routes to it (bounded by
// RouteTimeout), RESUME, which also follows a failure.
func (r *run) restartPrimary(ctx context.Context, pg *v1.Postgresql, primary *member) (err error) {
	name := primary.pod.Name
	if !r.restartStillPending(ctx, primary) {
		return nil
	}
	began := time.Now()
	paused := r.pausePoolers(ctx, name, name)
	if len(paused) == 0 {
		return r.restartMember(ctx, primary)
	}
	defer func() {
		if rerr := r.resumePoolers(ctx, paused, began); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err := r.restartMember(ctx, primary); err != nil {
		return err
	}
	super, err := r.superuser(ctx, pg, "")
	if err != nil {
		r.log.WithError(err).Warn("resuming the pooler without checking the restarted primary")
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, RouteTimeout)
	defer cancel()
	if err := r.awaitRoute(wait, pg, primary, super); err != nil {
		r.log.WithError(err).Warn("resuming the pooler anyway")
	}
	return nil
}
