package facts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// members parses the Patroni member data of pods (the pod annotation
// "status" Patroni's Kubernetes store writes each HA loop), by pod name.
// A pod without it, or with data that do not parse, has none. A pod's data
// are parsed once per version of the pod (s remembers them).
func (d *Deriver) members(s *derived, pods []*corev1.Pod) map[string]patroni.Member {
	var out map[string]patroni.Member
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		pm, seen := s.members[p.Name]
		if !seen || pm.version != p.ResourceVersion {
			pm.version = p.ResourceVersion
			pm.member, pm.ok = patroni.MemberOf(p.Annotations)
			if s.members == nil {
				s.members = map[string]parsedMember{}
			}
			s.members[p.Name] = pm
		}
		if !pm.ok {
			continue
		}
		if out == nil {
			out = map[string]patroni.Member{}
		}
		out[p.Name] = pm.member
	}
	return out
}

// parsedMember is a pod's member data, parsed from version of the pod.
type parsedMember struct {
	version string
	member  patroni.Member
	ok      bool
}

// secretVersion identifies one version of a Secret.
type secretVersion struct {
	uid     types.UID
	version string
}

// hasMember reports whether pod publishes Patroni member data.
func hasMember(members map[string]patroni.Member, pod string) bool {
	_, ok := members[pod]
	return ok
}

// switchoverCandidate returns the Ready replica with member data, not
// tagged nofailover, that has received the most WAL: the one a switchover
// from primary loses nothing to. "" when there is none; then wait is true
// when a Ready replica may become one shortly: its Patroni has not
// published it runs as a replica yet (it writes its member data once per
// HA loop, after the pod turned Ready).
func switchoverCandidate(pods []*corev1.Pod, members map[string]patroni.Member, primary string) (best string, wait bool) {
	bestLSN := int64(-1)
	for _, p := range pods {
		if p.Name == primary || p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		m, ok := members[p.Name]
		switch {
		case !ok || m.State != patroni.StateRunning || m.IsLeaderRole():
			wait = true
		case m.NoFailover():
		case m.XLogLocation > bestLSN:
			best, bestLSN = p.Name, m.XLogLocation
		}
	}
	return best, wait && best == ""
}

// inDatabase derives what pgloop applies inside PostgreSQL and Patroni: the
// sync and configuration the spec asks for, where to send them, and the
// members pending a restart.
func (d *Deriver) inDatabase(f *fsm.Facts, spec *derived, objs observed.Cluster, pods []*corev1.Pod, members map[string]patroni.Member, stsName string) {
	if f.SpecError != "" || f.Deleting {
		return
	}
	pg := objs.Postgresql
	d.deriveInDatabase(spec, pg)
	f.Users, f.Databases = spec.users, spec.databases
	f.SyncRequest = f.Request(v1.RequestSync).Value
	f.Rotation = rotationFacts(pg, objs.Secrets)
	f.Sync = d.syncWant(spec, objs.Secrets, f.SyncRequest)
	if sb := pg.Spec.Standby; sb != nil {
		// A standby's roles and databases are its source's, read-only
		// until it is promoted: nothing to sync.
		f.Sync = fsm.Want{}
		f.Standby = net.JoinHostPort(sb.StandbyHost, strconv.Itoa(sb.Port()))
		if sb.StandbyHost == "" {
			f.Standby = "the repository " + sb.S3WalPath
		}
	}
	f.Config = fsm.Want{Hash: spec.dynamic.Hash,
		Bootstrap: f.SyncRequest == "" && objs.StatefulSet != nil && d.bootstrapConfig(spec, objs.StatefulSet) == spec.dynamicJSON}
	if f.SyncRequest != "" {
		f.Config.Hash += "+" + f.SyncRequest
	}
	f.ConfigParameters = spec.dynamic.Parameters
	_, loopWait, _ := pg.Spec.Patroni.EffectiveTimings()
	f.LoopWait = time.Duration(loopWait) * time.Second

	for _, p := range pods {
		if m, ok := members[p.Name]; ok && m.PendingRestart {
			f.PendingRestart = append(f.PendingRestart, p.Name)
		}
	}
	switch m, ok := members[f.Primary]; {
	case f.Primary == "":
		f.NoTarget = "no primary"
		if f.NoPrimary != "" {
			f.NoTarget += ": " + f.NoPrimary
		}
	case !ok || m.ConnURL == "" || m.APIURL == "":
		f.NoTarget = "pod " + f.Primary + " has no Patroni member data (conn_url, api_url) yet"
	default:
		f.Target = f.Primary
	}
	// Restarts go one at a time, replicas first, while nothing else moves.
	if len(f.PendingRestart) == 0 || f.Ready < f.Desired || f.Outdated > 0 || f.Primary == "" {
		return
	}
	var next *corev1.Pod
	for _, p := range pods {
		if !slices.Contains(f.PendingRestart, p.Name) || p.DeletionTimestamp != nil {
			continue
		}
		if next == nil || next.Name == f.Primary || (p.Name != f.Primary && ordinal(p.Name, stsName) < ordinal(next.Name, stsName)) {
			next = p
		}
	}
	if next != nil {
		f.Restart = &fsm.PodRef{Name: next.Name, UID: string(next.UID)}
	}
}

// deriveInDatabase fills what the spec alone says of the in-database work,
// once per generation.
func (d *Deriver) deriveInDatabase(s *derived, pg *v1.Postgresql) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.specSync != nil {
		return
	}
	s.dynamic = cluster.Dynamic(pg)
	s.dynamicJSON = s.dynamic.JSON()
	// The status lists the roles and databases of preparedDatabases with
	// the manifest's.
	s.users = union(slices.Sorted(maps.Keys(pg.Spec.Users)), pg.Spec.PreparedRoleNames())
	s.databases = union(slices.Sorted(maps.Keys(pg.Spec.Databases)), pg.Spec.PreparedDatabaseNames())
	s.secretNames = cluster.Names(pg).Secrets
	h := sha256.New()
	for _, u := range slices.Sorted(maps.Keys(pg.Spec.Users)) {
		flags := make([]string, 0, len(pg.Spec.Users[u]))
		for _, fl := range pg.Spec.Users[u] {
			flags = append(flags, strings.ToUpper(string(fl)))
		}
		slices.Sort(flags)
		h.Write([]byte("user\x00" + u + "\x00" + strings.Join(flags, ",") + "\n"))
	}
	for _, db := range slices.Sorted(maps.Keys(pg.Spec.Databases)) {
		h.Write([]byte("database\x00" + db + "\x00" + pg.Spec.Databases[db] + "\n"))
	}
	for _, db := range pg.Spec.PreparedDatabaseNames() {
		// encoding/json writes map keys sorted: the same spec, the same
		// bytes.
		p, _ := json.Marshal(pg.Spec.PreparedDatabases[db])
		h.Write([]byte("prepared\x00" + db + "\x00" + string(p) + "\n"))
	}
	if pg.Spec.AnyPoolerEnabled() {
		s.pooler = true
		h.Write([]byte("pooler\x00" + pg.Spec.PoolerUser() + "\x00" + pg.Spec.PoolerSchema() + "\n"))
	}
	s.specSync = h.Sum(nil)
}

// bootstrapConfig returns the dynamic configuration sts bootstraps a new
// cluster with, read once per version of it.
func (d *Deriver) bootstrapConfig(s *derived, sts *appsv1.StatefulSet) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !s.stsRead || s.stsVersion != sts.ResourceVersion {
		s.stsRead, s.stsVersion, s.stsBootstrap = true, sts.ResourceVersion, cluster.BootstrapConfig(sts)
	}
	return s.stsBootstrap
}

// syncWant is the sync the spec asks for, with the versions of the roles'
// Secrets: a password changed, or a rotation asked for, is a new sync. It
// is Missing while a Secret is not in the cache (the ensure effects make
// it). The same Secret versions and request as last time give the last
// result without hashing: most observations of a cluster.
func (d *Deriver) syncWant(s *derived, secrets []*corev1.Secret, request string) fsm.Want {
	d.mu.Lock()
	defer d.mu.Unlock()
	same := s.syncVersions != nil && s.syncRequest == request
	for i, name := range s.secretNames {
		sec := secretNamed(secrets, name)
		if sec == nil {
			return fsm.Want{Missing: true}
		}
		same = same && s.syncVersions[i] == secretVersion{sec.UID, sec.ResourceVersion}
	}
	if same {
		return s.sync
	}
	versions := make([]secretVersion, len(s.secretNames))
	h := sha256.New()
	h.Write(s.specSync)
	for i, name := range s.secretNames {
		sec := secretNamed(secrets, name)
		versions[i] = secretVersion{sec.UID, sec.ResourceVersion}
		h.Write([]byte(name + "\x00" + string(sec.UID) + "\x00" + sec.ResourceVersion + "\n"))
	}
	h.Write([]byte("request\x00" + request))
	s.sync = fsm.Want{
		Hash:      hex.EncodeToString(h.Sum(nil)[:8]),
		Bootstrap: len(s.users) == 0 && len(s.databases) == 0 && !s.pooler && request == "",
	}
	s.syncVersions, s.syncRequest = versions, request
	return s.sync
}

// rotationFacts are the users pg's spec rotates on schedule, with and
// without the operator's --password-rotation, and which rotation each
// user's Secret took.
func rotationFacts(pg *v1.Postgresql, secrets []*corev1.Secret) fsm.RotationFacts {
	_, global := pg.Spec.RotatedUsers(true)
	_, listed := pg.Spec.RotatedUsers(false)
	var out fsm.RotationFacts
	if len(global) > 0 {
		out.Global = global
	}
	if len(listed) > 0 {
		out.Listed = listed
	}
	for u := range global {
		sec := secretNamed(secrets, cluster.SecretName(u, pg.Name))
		if sec == nil {
			continue
		}
		if id := sec.Annotations[v1.AnnotationPasswordRotated]; id != "" {
			if out.Rotated == nil {
				out.Rotated = map[string]string{}
			}
			out.Rotated[u] = id
		}
	}
	return out
}

// union merges sorted a and b, sorted, without repeats.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func secretNamed(secrets []*corev1.Secret, name string) *corev1.Secret {
	for _, s := range secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}
