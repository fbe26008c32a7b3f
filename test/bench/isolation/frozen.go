package isolation

// The frozen mode (Config.Frozen, issue 13): healthy clusters measured next
// to K hung primaries. Each frozen cluster runs a real Patroni and
// PostgreSQL 15 on the plane's process node (docs/testbed.md, "Data
// plane"); once it is Running with its roles synced, the process kubelet
// stops its PostgreSQL only (kubelet.FreezePostgres: Patroni keeps the pod
// Ready while every SQL connection hangs after the TCP handshake), and a
// user is added to its spec. Each try of the sync then holds an executor
// worker until the operator's connect deadline, fails, and is retried after
// a backoff that doubles.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// lateUser is the merge patch that adds a user to a frozen cluster: its
// sync is what hangs.
const lateUser = `{"spec":{"users":{"late":[]}}}`

// frozenPhase measures the healthy clusters next to k hung primaries. It
// removes the previous K's frozen clusters, makes k new ones on the process
// node and waits until each is Running with its roles synced and its
// configuration applied, and measures once (p.Unfrozen: the cost of k real
// Patroni and PostgreSQL alone). It then freezes the PostgreSQL of each and
// adds a user to its spec, waits until every one shows its sync timed out,
// and measures again at once: their retries keep the operator busy, it is
// never quiet. With k = 0 it measures once the operator is quiet, as the
// stuck mode does.
func (b *bench) frozenPhase(ctx context.Context, k int) (Phase, error) {
	p := Phase{K: k}
	if err := b.dropFrozen(ctx); err != nil {
		return p, err
	}
	if k == 0 {
		settle, quiet, err := benchkit.WaitQuiet(ctx, b.metrics, b.cfg.QuietTimeout)
		if err != nil {
			return p, err
		}
		p.Settle, p.Quiet = settle, quiet
		if quiet {
			b.logf("K=0: operator quiet after %v", benchkit.Ms(settle))
		} else {
			b.logf("K=0: operator NOT quiet after %v; measuring anyway", benchkit.Ms(settle))
		}
	} else {
		if err := b.makeFrozen(ctx, &p); err != nil {
			return p, err
		}
		unfrozen := Phase{K: k}
		before, err := b.metrics.Scrape(ctx)
		if err != nil {
			return p, err
		}
		b.logf("K=%d: measuring next to the %d clusters Running, none frozen yet", k, k)
		err = b.measure(ctx, &unfrozen, before, fmt.Sprintf("%d-unfrozen", k))
		if len(unfrozen.Clusters) > 0 {
			p.Unfrozen = &unfrozen
		}
		if err != nil {
			return p, err
		}
		b.logf("K=%d, none frozen: healthy create → Running median %v, p99 %v", k, benchkit.Ms(unfrozen.ToRunning().Median), benchkit.Ms(unfrozen.ToRunning().P99))
		if err := b.hang(ctx, &p); err != nil {
			return p, err
		}
	}
	before, err := b.metrics.Scrape(ctx)
	if err != nil {
		return p, err
	}
	err = b.measure(ctx, &p, before, fmt.Sprint(k))
	p.HungAtEnd = b.countFrozen(hung)
	return p, err
}

// makeFrozen makes p.K clusters on the process node and waits until each
// is Running with its roles synced and its configuration applied.
func (b *bench) makeFrozen(ctx context.Context, p *Phase) error {
	k := p.K
	began := time.Now()
	for i := range k {
		pg := pgtest.Cluster(b.frozenNS, fmt.Sprintf("frozen-k%d-%d", k, i), 1)
		pgtest.WithApp(pg)
		pgtest.OnProcessNode(pg)
		if _, err := b.pg.PgloopV1().Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating frozen cluster %s/%s: %w", pg.Namespace, pg.Name, err)
		}
		b.frozen = append(b.frozen, pg.Namespace+"/"+pg.Name)
	}
	b.logf("K=%d: created %d clusters on the process node; waiting until each is Running with its roles synced and configuration applied", k, k)
	if err := b.waitFrozen(ctx, "Running with their roles synced and configuration applied", synced); err != nil {
		return err
	}
	p.ReadyAfter = time.Since(began)
	b.logf("K=%d: all %d Running with roles synced and configuration applied %v after the first Create", k, k, benchkit.Ms(p.ReadyAfter))
	return nil
}

// hang freezes the PostgreSQL of each frozen cluster, adds a user to its
// spec, and waits until every one shows its sync timed out.
func (b *bench) hang(ctx context.Context, p *Phase) error {
	k := p.K
	frozeAt := time.Now()
	if err := b.freezeAll(ctx); err != nil {
		return err
	}
	b.logf("K=%d: no PostgreSQL of the %d answers %v after the first freeze; adding user late to each", k, k, benchkit.Ms(time.Since(frozeAt)))
	for _, key := range b.frozen {
		ns, name, _ := strings.Cut(key, "/")
		if _, err := b.pg.PgloopV1().Postgresqls(ns).Patch(ctx, name, types.MergePatchType, []byte(lateUser), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("while adding a user to %s: %w", key, err)
		}
	}
	if err := b.waitFrozen(ctx, "showing their sync hung (RolesSynced False, "+hungWords+")", hung); err != nil {
		return err
	}
	p.HungAfter = time.Since(frozeAt)
	p.HungMessage = b.tracker.Snapshot(b.frozen[0]).Conditions[v1.ConditionRolesSynced].Message
	b.logf("K=%d: all %d hung mid-sync %v after the first freeze (%s: %q); measuring at once", k, k, benchkit.Ms(p.HungAfter), b.frozen[0], p.HungMessage)
	return nil
}

// waitFrozen waits until pred holds for every frozen cluster, at most
// FrozenTimeout; its error lists those for which it does not.
func (b *bench) waitFrozen(ctx context.Context, what string, pred func(*benchkit.Seen) bool) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.FrozenTimeout)
	defer cancel()
	var notYet []string
	err := b.tracker.Wait(ctx, func(m map[string]*benchkit.Seen) bool {
		notYet = notYet[:0]
		for _, key := range b.frozen {
			if s := m[key]; !pred(s) {
				notYet = append(notYet, describe(key, s))
			}
		}
		return len(notYet) == 0
	})
	if err != nil {
		return fmt.Errorf("frozen clusters not %s: %w\n%s", what, err, strings.Join(notYet, "\n"))
	}
	return nil
}

// describe says where a cluster is, for an error.
func describe(key string, s *benchkit.Seen) string {
	if s == nil {
		return key + ": not seen"
	}
	roles := s.Conditions[v1.ConditionRolesSynced]
	return fmt.Sprintf("%s: state %q (current %v), message %q, RolesSynced %s %q, ConfigApplied %s",
		key, s.State, s.Current, s.Message, roles.Status, roles.Message, s.Conditions[v1.ConditionConfigApplied].Status)
}

// countFrozen counts the frozen clusters for which pred holds.
func (b *bench) countFrozen(pred func(*benchkit.Seen) bool) int {
	n := 0
	for _, key := range b.frozen {
		s := b.tracker.Snapshot(key)
		if pred(&s) {
			n++
		}
	}
	return n
}

// freezeAll asks the process kubelet to stop the PostgreSQL of every
// frozen cluster's pod, and waits until none answers: no API object shows
// it (the pod stays Ready), so each server is asked, every 50ms, until a
// connection's first message goes unanswered for a second. A user added
// before that could be made by a PostgreSQL not stopped yet.
func (b *bench) freezeAll(ctx context.Context) error {
	for _, key := range b.frozen {
		if err := b.setFreeze(ctx, key, kubelet.FreezePostgres); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.FrozenTimeout)
	defer cancel()
	errs := make([]error, len(b.frozen))
	var wg sync.WaitGroup
	for i, key := range b.frozen {
		wg.Go(func() { errs[i] = b.waitSilent(ctx, key) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setFreeze sets the process kubelet's freeze annotation on the pod of a
// frozen cluster to value, or removes it when value is "".
func (b *bench) setFreeze(ctx context.Context, key, value string) error {
	ns, name, _ := strings.Cut(key, "/")
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, kubelet.FreezeAnnotation, v)
	pod := name + "-0"
	if _, err := b.kube.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("while setting %s=%q on pod %s/%s: %w", kubelet.FreezeAnnotation, value, ns, pod, err)
	}
	return nil
}

// waitSilent waits until the PostgreSQL of a frozen cluster's pod no
// longer answers.
func (b *bench) waitSilent(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	pod, err := b.kube.CoreV1().Pods(ns).Get(ctx, name+"-0", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("while reading the pod of %s: %w", key, err)
	}
	if pod.Status.PodIP == "" {
		return fmt.Errorf("the pod of %s has no IP", key)
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(cluster.PostgresPort))
	for {
		ok, err := answers(ctx, addr, time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if !ok {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("the PostgreSQL of %s at %s still answers: %w", key, addr, ctx.Err())
		}
	}
}

// sslRequest is the first message of a PostgreSQL connection that asks for
// TLS: a length of 8 and the code 80877103. A server answers it with one
// byte, 'S' or 'N', before any authentication.
var sslRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// answers reports whether the PostgreSQL server at addr answers an
// SSLRequest within timeout. A frozen server's kernel still accepts the
// connection, but nothing reads from it. Anything other than a timeout (a
// byte, the connection closed or reset) is an answer; a connection that
// cannot be made at all is an error.
func answers(ctx context.Context, addr string, timeout time.Duration) (bool, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, fmt.Errorf("while connecting to PostgreSQL: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return false, err
	}
	if _, err := conn.Write(sslRequest); err != nil {
		return true, nil
	}
	var answer [1]byte
	_, err = conn.Read(answer[:])
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false, nil
	}
	return true, nil
}

// dropFrozen thaws the current frozen clusters, waits until each has made
// its new user and runs again, deletes them and waits until they and their
// pods are gone: their Patroni and PostgreSQL must not weigh on the next
// K's measurement, and the process kubelet must have no pod left when the
// plane stops. Deleting a pod right after its thaw once left Patroni stuck
// after it had stopped PostgreSQL, until the pod's grace period of 5
// minutes ran out: the wait for the sync gives each Patroni time to settle
// first. A cluster that does not sync again is deleted all the same, and
// reported.
func (b *bench) dropFrozen(ctx context.Context) error {
	if len(b.frozen) == 0 {
		return nil
	}
	began := time.Now()
	for _, key := range b.frozen {
		if err := b.setFreeze(ctx, key, ""); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	resumed := b.waitFrozen(ctx, "Running again with their new user", synced)
	if resumed == nil {
		b.logf("thawed the %d frozen clusters: all Running with their new user %v later", len(b.frozen), benchkit.Ms(time.Since(began)))
	}
	deleted := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.FrozenTimeout)
	defer cancel()
	for _, key := range b.frozen {
		ns, name, _ := strings.Cut(key, "/")
		if err := b.pg.PgloopV1().Postgresqls(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return errors.Join(resumed, fmt.Errorf("while deleting frozen cluster %s: %w", key, err))
		}
	}
	if err := b.waitFrozen(ctx, "gone", func(s *benchkit.Seen) bool { return s == nil || s.Gone }); err != nil {
		return errors.Join(resumed, err)
	}
	if err := waitNoPods(ctx, b.kube, b.frozenNS); err != nil {
		return errors.Join(resumed, err)
	}
	b.logf("deleted the %d frozen clusters; they and their pods were gone %v later", len(b.frozen), benchkit.Ms(time.Since(deleted)))
	b.frozen = nil
	return resumed
}

// waitNoPods waits until namespace ns has no pod: a watch, whose store is
// looked at on every event.
func waitNoPods(ctx context.Context, kube kubernetes.Interface, ns string) error {
	var store cache.Store
	empty := func() bool { return len(store.List()) == 0 }
	_, err := watchtools.UntilWithSync(ctx, testbed.Pods(kube, ns, ""), &corev1.Pod{},
		func(s cache.Store) (bool, error) { store = s; return empty(), nil },
		func(watch.Event) (bool, error) { return empty(), nil })
	if err != nil {
		var left []string
		if store != nil {
			left = store.ListKeys()
		}
		return fmt.Errorf("pods of %s not gone: %w (left: %v)", ns, err, left)
	}
	return nil
}

// synced reports whether a cluster runs its current spec with its roles
// and databases synced and its configuration applied: what a frozen
// cluster must reach before its PostgreSQL is frozen.
func synced(s *benchkit.Seen) bool {
	return s != nil && !s.Gone && s.State == fsm.Running && s.Current &&
		s.Conditions[v1.ConditionRolesSynced].Status == metav1.ConditionTrue &&
		s.Conditions[v1.ConditionConfigApplied].Status == metav1.ConditionTrue
}

// hungWords is how pkg/pgsql says that PostgreSQL did not answer a
// connection or a statement within its deadline.
const hungWords = "did not answer within"

// hung reports whether a cluster's last sync of roles timed out: RolesSynced
// False, saying the primary did not answer within a deadline.
func hung(s *benchkit.Seen) bool {
	if s == nil || s.Gone {
		return false
	}
	c := s.Conditions[v1.ConditionRolesSynced]
	return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, hungWords)
}
