package facts

import (
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// Deriver turns an observed.Cluster into its fsm.Facts. The facts are a
// function of the objects and the time only; the Deriver remembers, per
// cluster, what saves work on the next observation (derived): what the
// spec alone says, computed once per (UID, generation, Patroni store) and
// not again for every pod event, and within it the pods' parsed Patroni
// member data (per pod resourceVersion), the StatefulSet's bootstrap
// configuration (per its resourceVersion) and the last sync hash (per
// Secret versions and sync request). It is safe for concurrent use (a mutex guards that memory);
// the controller calls it through the Observer, on the loop goroutine.
type Deriver struct {
	// build are the settings the desired StatefulSet is built with: the
	// effects' own, or ObjectsCurrent stays false.
	build cluster.Options
	// switchover: a rollout hands the primary's role to a replica before
	// it replaces the primary's pod (Facts.Switchover).
	switchover bool

	mu   sync.Mutex
	memo map[types.NamespacedName]*derived
}

// derived is what the spec of one cluster says, for one (UID, generation)
// and Patroni store: the store is an annotation (v1.AnnotationPatroniStore),
// which the adoption writes without a new generation, and the desired pod
// template differs with it.
type derived struct {
	uid        types.UID
	generation int64
	store      v1.PatroniStore
	specError  string
	// desired is what cluster.Compare reads of the StatefulSet the spec
	// asks for, built on first need (the whole object, its pod template
	// most of it, is not kept); poolers are the connection poolers'
	// Deployments it asks for, by name (poolersBuilt: built).
	desired      *cluster.StatefulSetSummary
	poolers      map[string]*appsv1.Deployment
	poolersBuilt bool
	// backup is the logical backup CronJob it asks for, nil when none
	// (backupBuilt: built).
	backup      *batchv1.CronJob
	backupBuilt bool
	// dynamic is the Patroni dynamic configuration the spec asks for,
	// and its JSON as cluster.BootstrapConfig reads it.
	dynamic     cluster.DynamicConfig
	dynamicJSON string
	// stsBootstrap is the dynamic configuration the StatefulSet of
	// resourceVersion stsVersion bootstraps with (stsRead: read once).
	stsVersion, stsBootstrap string
	stsRead                  bool
	// users and databases are the spec's names, sorted; secretNames are
	// the names of the Secrets that hold the passwords of the system roles
	// and the users.
	users, databases, secretNames []string
	// pooler: a connection pooler is enabled, its role and lookup are
	// part of the sync.
	pooler bool
	// specSync hashes what the spec alone says of the sync.
	specSync []byte
	// sync is the last sync derived, for the Secret versions and the
	// request it was derived from: the same ones give it again without
	// hashing.
	sync         fsm.Want
	syncVersions []secretVersion
	syncRequest  string
	// members are the pods' Patroni member data as last parsed, by pod
	// name, with the pod's resourceVersion they were parsed from.
	members map[string]parsedMember
	// fullSchedule and diffSchedule are the backup schedules, nil for
	// none, once schedulesParsed.
	fullSchedule, diffSchedule fsm.Schedule
	schedulesParsed            bool
}

// NewDeriver returns a Deriver that builds the desired StatefulSet with
// build, which must be the cluster.Options the effects build it with.
// With switchover, a rollout switches over before it replaces the primary.
func NewDeriver(build cluster.Options, switchover bool) *Deriver {
	return &Deriver{build: build, switchover: switchover, memo: map[types.NamespacedName]*derived{}}
}

// Facts returns the facts of the cluster objs describe; now ages its
// Warning Events. objs are not modified. Each step reads what the steps
// before it set in the facts.
func (d *Deriver) Facts(objs observed.Cluster, now time.Time) fsm.Facts {
	pg := objs.Postgresql
	spec := d.derive(pg)
	f := fsm.Facts{
		Generation: pg.Generation,
		Deleting:   pg.DeletionTimestamp != nil,
		Desired:    pg.Spec.NumberOfInstances,
		SpecError:  spec.specError,
		Requests:   requests(pg, objs.Secrets),
	}
	if f.SpecError == "" {
		f.SpecError = storeChanged(pg, objs.StatefulSet)
	}
	stsName := cluster.StatefulSetName(pg.Name)
	// Name order makes "the first cause found" the same on every call.
	pods := objs.Pods
	if !slices.IsSortedFunc(pods, byName) {
		pods = slices.SortedFunc(slices.Values(pods), byName)
	}

	// The pods: their counts, the primary (primary.go), and what a
	// rollout does next (pods.go).
	store := pg.PatroniStore()
	leader, recorded := leaderRecord(objs, store)
	scan := scanPods(objs, pods, leader)
	f.Ready, f.Outdated = scan.ready, scan.outdated
	f.Primary, f.NoPrimary = primary(store, pg.Name, leader, recorded, scan.leaderPod)
	members := d.members(spec, pods)
	f.Replace, f.ReplaceRunning, f.Switchover = d.replacement(&f, &scan, pods, members)
	f.PausePooler = pg.Spec.PoolerEnabled(false)
	// A desired pod that is not outdated runs the current template, or
	// is missing or terminating: the StatefulSet controller makes it from
	// that template.
	f.RolloutStarted = scan.next != nil && scan.outdatedDesired < f.Desired

	// What pgloop applies inside PostgreSQL and Patroni (indatabase.go),
	// and whether the owned objects are the spec's.
	d.inDatabase(&f, spec, objs, pods, members, stsName)
	f.TemplateChanged, f.ObjectsCurrent, f.Pooler = d.compareObjects(&f, spec, objs, scan.existing)

	// The maintenance windows, and the volumes (volumes.go).
	if open, next := v1.InWindow(pg.Spec.MaintenanceWindows, now); !open {
		f.MaintenanceOpens = next
		f.MaintenanceWait = maintenanceWait(pg.Spec.MaintenanceWindows, next)
	}
	f.VolumeSize = pg.Spec.Volume.Size.String()
	f.Volumes = volumes(objs, stsName, f.Desired, pg.Spec.Volume.Size)

	// The backup repository, and how archiving to it goes as last checked
	// (pkg/archiving).
	if repo := cluster.Repository(pg, d.build); repo != nil {
		f.Repository = cluster.RepositoryURL(pg, repo)
		f.Archiving = objs.Archiving
		f.Backup = d.backupFacts(spec, pg, objs)
	} else if why := cluster.ArchiveBlocked(pg, d.build); why != "" {
		f.ArchiveBlocked = why
	}

	// Last, what holds the cluster back (stuck.go).
	c := stuckCause(&f, &scan, objs, now)
	f.StuckReason, f.Stuck, f.StuckStale, f.Nudge = c.reason, c.message, c.stale, c.nudge
	return f
}

// compareObjects compares the objects the cluster owns with those its
// spec asks for, given f's counts and existing, the pods that are not
// terminating. templateChanged: the StatefulSet's pod template is not the
// spec's, while every desired pod runs its template and is Ready
// (Facts.TemplateChanged). current:
// the StatefulSet, the poolers' Deployments and the logical backup CronJob
// are the spec's, and every desired pod exists from the StatefulSet's
// template (Facts.ObjectsCurrent). pooler says which pooler does not run
// all its pods yet (Facts.Pooler).
func (d *Deriver) compareObjects(f *fsm.Facts, spec *derived, objs observed.Cluster, existing int32) (templateChanged, current bool, pooler string) {
	pg, sts := objs.Postgresql, objs.StatefulSet
	// Cheapest checks first: the desired StatefulSet is built (once per
	// generation) only when every desired pod exists from the
	// StatefulSet's template.
	change := cluster.NoChange
	if f.SpecError == "" && sts != nil && f.Outdated == 0 && existing == f.Desired {
		change = cluster.CompareSummary(sts, *d.desiredStatefulSet(spec, pg))
	}
	templateChanged = change == cluster.ReplacePods && f.Desired > 0 && f.Ready == f.Desired
	current = f.SpecError == "" && sts != nil &&
		sts.Status.ObservedGeneration >= sts.Generation &&
		ptr.Deref(sts.Spec.Replicas, 1) == f.Desired &&
		f.Outdated == 0 && existing == f.Desired && change == cluster.NoChange
	if f.SpecError == "" {
		var poolersCurrent bool
		poolersCurrent, pooler = d.poolers(spec, pg, objs.Poolers, objs.PoolerPods)
		current = current && poolersCurrent && d.logicalBackup(spec, pg, objs.LogicalBackup)
	}
	return templateChanged, current, pooler
}

// maintenanceWait says the cluster waits for its maintenance windows,
// and when the next one opens.
func maintenanceWait(windows []v1.MaintenanceWindow, next time.Time) string {
	names := make([]string, len(windows))
	for i, w := range windows {
		names[i] = strings.TrimSpace(string(w))
	}
	return "waiting for a maintenance window (" + strings.Join(names, ", ") + " UTC): the next opens at " +
		next.UTC().Format(time.RFC3339)
}

// Forget drops what was remembered of cluster key ("namespace/name"), once
// its resource is gone.
func (d *Deriver) Forget(key string) {
	ns, name, _ := strings.Cut(key, "/")
	d.mu.Lock()
	delete(d.memo, types.NamespacedName{Namespace: ns, Name: name})
	d.mu.Unlock()
}

// derive returns what the spec of pg says, computed once per (UID,
// generation, Patroni store).
func (d *Deriver) derive(pg *v1.Postgresql) *derived {
	key := types.NamespacedName{Namespace: pg.Namespace, Name: pg.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.memo[key]; s.of(pg) {
		return s
	}
	s := &derived{uid: pg.UID, generation: pg.Generation, store: pg.PatroniStore()}
	if errs := pg.Validate(); len(errs) > 0 {
		s.specError = errs.ToAggregate().Error()
	}
	d.memo[key] = s
	return s
}

// KnownStatefulSet returns what cluster.Compare reads of the StatefulSet
// pg asks for, when the facts of pg's generation have already built it;
// false when they have not (nothing is built here). The effects' ensure
// reads it to spare a build of its own (effects.Options.Desired).
func (d *Deriver) KnownStatefulSet(pg *v1.Postgresql) (cluster.StatefulSetSummary, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.memo[types.NamespacedName{Namespace: pg.Namespace, Name: pg.Name}]
	if !s.of(pg) || s.desired == nil {
		return cluster.StatefulSetSummary{}, false
	}
	return *s.desired, true
}

// of reports whether s (nil for none) is what pg's spec says: the same
// UID, generation and Patroni store.
func (s *derived) of(pg *v1.Postgresql) bool {
	return s != nil && s.uid == pg.UID && s.generation == pg.Generation && s.store == pg.PatroniStore()
}

// desiredStatefulSet returns what cluster.Compare reads of the
// StatefulSet pg asks for; s must be pg's. Building it hashes the pod
// template, so it is done once per generation.
func (d *Deriver) desiredStatefulSet(s *derived, pg *v1.Postgresql) *cluster.StatefulSetSummary {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.desired == nil {
		summary := cluster.Summarize(cluster.StatefulSet(pg, d.build))
		s.desired = &summary
	}
	return s.desired
}
