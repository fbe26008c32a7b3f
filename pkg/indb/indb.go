package indb

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// ErrNoPrimary is returned, wrapped, when no pod of a cluster publishes
// Patroni member data as the primary (yet): there is nobody to ask. It
// wraps act.ErrWaiting.
var ErrNoPrimary = fmt.Errorf("no primary publishes its member data (%w)", act.ErrWaiting)

// Options configure an Actor.
type Options struct {
	// Build are the builders' options: the default backup repository and
	// its retention, which a base backup's program is built with.
	Build cluster.Options
	// Verify runs pgBackRest's verify of the repository after each base
	// backup that succeeded.
	Verify bool
	// Random is the source of the passwords of rotations; nil means
	// crypto/rand.Reader. Steps of several clusters run at once: it must
	// be safe for concurrent use (tests pass a seeded one and one step at
	// a time).
	Random io.Reader
	// Log is the entry the actor logs to; nil means the standard logger.
	Log *logrus.Entry
	// Cache is where the steps read the resources and pods of the
	// clusters: the informers' caches. Nil means every read goes to the
	// API.
	Cache Cache
	// SQL bounds the connections and statements to PostgreSQL.
	SQL pgsql.Options
	// ObserveSQL, when set, counts SQL statements by cluster key and
	// outcome (ok, error, timeout).
	ObserveSQL func(key, outcome string)
	// Patroni is the client of Patroni's REST API; nil means one with
	// the default timeout.
	Patroni *patroni.Client
	// RestartTimeout bounds a member's restart (Patroni waits for
	// PostgreSQL to come back up that long).
	RestartTimeout time.Duration
}

// Cache is what the steps read instead of the API: the informers' caches
// (pkg/informers implements it). The Secrets' data are not cached: they
// are always read from the API.
type Cache interface {
	// Postgresql returns the resource of cluster key ("namespace/name").
	Postgresql(key string) (*v1.Postgresql, bool)
	// Pods returns the pods of cluster key, terminating ones included.
	Pods(key string) []*corev1.Pod
}

// Actor does the work inside the clusters' PostgreSQL, Patroni and
// PgBouncer (see the package comment), one method per kind of step, each
// for the cluster key ("namespace/name"), and reads for the archive checks
// what only a primary can tell. It is safe for concurrent use: steps of
// different clusters run at once.
type Actor struct {
	kube           kubernetes.Interface
	pg             pgclient.Interface
	cache          Cache
	build          cluster.Options
	verify         bool
	random         io.Reader
	log            *logrus.Entry
	sql            pgsql.Options
	observeSQL     func(key, outcome string)
	patroni        *patroni.Client
	restartTimeout time.Duration

	mu sync.Mutex
	// passwords are the superuser's passwords the readers use, by
	// cluster key, at the Secret's resource version they were read at.
	passwords map[string]password
}

// password is a Secret's passwords at a resource version.
type password struct {
	version string
	value   []string
}

// New returns the Actor that reaches the clusters' pods as the API
// through kube (pods, Secrets, EndpointSlices) and pg (the resources)
// shows them.
func New(kube kubernetes.Interface, pg pgclient.Interface, opts Options) *Actor {
	log := opts.Log
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	random := opts.Random
	if random == nil {
		random = rand.Reader
	}
	pc := opts.Patroni
	if pc == nil {
		pc = &patroni.Client{}
	}
	return &Actor{kube: kube, pg: pg, cache: opts.Cache, build: opts.Build, verify: opts.Verify, random: random, log: log,
		sql: opts.SQL, observeSQL: opts.ObserveSQL, patroni: pc, restartTimeout: opts.RestartTimeout,
		passwords: map[string]password{}}
}

// run is one step (or read) on one cluster.
type run struct {
	*Actor
	key, ns, name string
	log           *logrus.Entry
}

// run returns the run of one step on the cluster key.
func (a *Actor) run(key string) (*run, error) {
	ns, name, err := act.SplitKey(key)
	if err != nil {
		return nil, err
	}
	return &run{Actor: a, key: key, ns: ns, name: name, log: a.log.WithField("cluster", key)}, nil
}

// getCluster reads the resource: from the cache, or from the API when
// there is none, when fresh (a status pgloop wrote a moment ago) or when
// the cache does not have it. The resource is shared with the cache: the
// steps only read it. It is nil, with no error, when the resource is gone,
// which every step takes as success.
func (r *run) getCluster(ctx context.Context, fresh bool) (*v1.Postgresql, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.cache != nil && !fresh {
		if pg, ok := r.cache.Postgresql(r.key); ok {
			return pg, nil
		}
	}
	pg, err := r.pg.PgloopV1().Postgresqls(r.ns).Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get postgresql %s: %w", r.key, err)
	}
	return pg, nil
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

// member is one pod of a cluster with its Patroni member data.
type member struct {
	pod *corev1.Pod
	patroni.Member
}

// members returns the pods that run (not terminating) with their Patroni
// member data, by name, and the primary among them: the one whose member
// data say it leads, nil when none does. A pod without member data is left
// out. It is the one place that finds a cluster's primary for the work
// inside PostgreSQL and for the archive checks.
func members(pods []*corev1.Pod) (all []member, primary *member) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if m, ok := patroni.MemberOf(p.Annotations); ok {
			all = append(all, member{pod: p, Member: m})
		}
	}
	slices.SortFunc(all, func(a, b member) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	for i := range all {
		if all[i].IsLeaderRole() {
			primary = &all[i]
		}
	}
	return all, primary
}

// clusterMembers reads the cluster's resource and its members (members);
// pg is nil, with no error, when the resource is gone. With no primary the
// error wraps ErrNoPrimary.
func (r *run) clusterMembers(ctx context.Context) (pg *v1.Postgresql, all []member, primary *member, err error) {
	if pg, err = r.getCluster(ctx, false); pg == nil || err != nil {
		return nil, nil, nil, err
	}
	pods, err := r.pods(ctx, pg)
	if err != nil {
		return pg, nil, nil, err
	}
	all, primary = members(pods)
	if primary == nil {
		return pg, all, nil, fmt.Errorf("cluster %s: %w", r.key, ErrNoPrimary)
	}
	return pg, all, primary, nil
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
		return nil, fmt.Errorf("secret %s of role %s does not exist yet (%w)", name, role, act.ErrWaiting)
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

// superuser returns the superuser's passwords of pg. A step passes no
// version: it reads the Secret every time, since a rotation may have
// changed it a moment ago. A reader (the archive checks) passes the
// Secret's resource version the caches show: the Secret is read again only
// when that changed.
func (r *run) superuser(ctx context.Context, pg *v1.Postgresql, version string) ([]string, error) {
	if version != "" {
		r.mu.Lock()
		cached, ok := r.passwords[r.key]
		r.mu.Unlock()
		if ok && cached.version == version {
			return cached.value, nil
		}
	}
	s, err := r.secret(ctx, pg, cluster.SuperuserName)
	if err != nil {
		return nil, err
	}
	value := passwords(s)
	if version != "" {
		r.mu.Lock()
		r.passwords[r.key] = password{version: s.ResourceVersion, value: value}
		r.mu.Unlock()
	}
	return value, nil
}

// reachPrimary returns the primary among pods and where it listens as the
// superuser (superuser's version): how every read and every start of a
// run on a primary begins. The error wraps ErrNoPrimary when no pod
// publishes as the primary.
func (r *run) reachPrimary(ctx context.Context, pg *v1.Postgresql, pods []*corev1.Pod, version string) (*member, pgsql.Endpoint, error) {
	_, primary := members(pods)
	if primary == nil {
		return nil, pgsql.Endpoint{}, fmt.Errorf("cluster %s: %w", r.key, ErrNoPrimary)
	}
	pw, err := r.superuser(ctx, pg, version)
	if err != nil {
		return nil, pgsql.Endpoint{}, err
	}
	ep, err := primary.endpoint("primary", pw)
	return primary, ep, err
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

// partError marks err as a failure of part, for the machine (act.PartError).
func partError(part string, err error) error {
	if err == nil {
		return nil
	}
	return &act.PartError{Part: part, Err: err}
}

// isWaiting reports whether err means "not yet" (act.ErrWaiting).
func isWaiting(err error) bool { return errors.Is(err, act.ErrWaiting) }
