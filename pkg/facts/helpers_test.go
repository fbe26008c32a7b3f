package facts

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/observed"
)

// The cluster fixtures are shared with the other package that derives or
// caches facts (pkg/internal/fixtures).
var (
	now           = fixtures.Now
	ago           = fixtures.Ago
	newPG         = fixtures.NewPG
	statefulSet   = fixtures.StatefulSet
	pod           = fixtures.Pod
	master        = fixtures.Master
	lock          = fixtures.Lock
	lockEndpoints = fixtures.LockEndpoints
	notReady      = fixtures.NotReady
	terminating   = fixtures.Terminating
	outdated      = fixtures.Outdated
	unschedulable = fixtures.Unschedulable
	waiting       = fixtures.Waiting
	claim         = fixtures.Claim
	withClass     = fixtures.WithClass
	claimEvent    = fixtures.ClaimEvent
	resourceQuota = fixtures.ResourceQuota
	event         = fixtures.Event
)

const ns = fixtures.Namespace

// quotaVersionOf is quotaVersion of a namespace holding quotas.
func quotaVersionOf(quotas ...*corev1.ResourceQuota) string { return quotaVersion(quotas, ns) }

// nudged returns a copy of sts nudged for the quota version v.
func nudged(sts *appsv1.StatefulSet, v string) *appsv1.StatefulSet {
	out := sts.DeepCopy()
	out.Annotations = map[string]string{cluster.AnnotationQuotaSeen: v}
	return out
}

// objects sorts objs into the observed.Cluster of pg, as a cache would hold
// them: every Event by the kind of object it is about, whatever its type.
func objects(pg *v1.Postgresql, objs ...runtime.Object) observed.Cluster {
	out := observed.Cluster{Postgresql: pg}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			out.StatefulSet = o
		case *appsv1.Deployment:
			out.Poolers = append(out.Poolers, o)
		case *batchv1.CronJob:
			out.LogicalBackup = o
		case *corev1.Pod:
			out.Pods = append(out.Pods, o)
		case *corev1.Secret:
			out.Secrets = append(out.Secrets, o)
		case *corev1.PersistentVolumeClaim:
			out.Claims = append(out.Claims, o)
		case *corev1.ConfigMap:
			out.Leader = o
		case *corev1.Endpoints:
			out.LeaderEndpoints = o
		case *corev1.Event:
			if o.InvolvedObject.Kind == "StatefulSet" {
				out.StatefulSetWarnings = append(out.StatefulSetWarnings, o)
			} else {
				out.ClaimWarnings = append(out.ClaimWarnings, o)
			}
		case *corev1.ResourceQuota:
			out.Quotas = append(out.Quotas, o)
		default:
			panic(fmt.Sprintf("objects: unexpected %T", o))
		}
	}
	return out
}

// podFacts are f without what the in-database facts add (TestInDatabase
// checks those).
func podFacts(f fsm.Facts) fsm.Facts {
	f.Sync, f.Config, f.ConfigParameters, f.Users, f.Databases = fsm.Want{}, fsm.Want{}, nil, nil, nil
	f.SyncRequest, f.Target, f.NoTarget, f.PendingRestart, f.Restart = "", "", "", nil, nil
	f.VolumeSize = "" // volumes_test.go tests Volumes
	f.LoopWait = 0    // indatabase_test.go tests it
	return f
}
