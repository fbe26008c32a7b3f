package informers

import (
	"hash/maphash"
	"maps"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labelMapFields are the maps share hands out once per distinct content
// (labelMaps): an object's labels and a label selector's, the same in
// every object of a cluster (its StatefulSet, Services, Secrets, budget
// and claims carry the cluster's labels; selectors select them) and
// changed by no update but a role's. Annotations are left out: Patroni's
// ConfigMaps' and pods' change with every leader renewal and status, and
// each new content would stay in the table for a period or two.
var labelMapFields = map[reflect.Type]string{
	reflect.TypeFor[metav1.ObjectMeta]():    "Labels",
	reflect.TypeFor[metav1.LabelSelector](): "MatchLabels",
	reflect.TypeFor[corev1.ServiceSpec]():   "Selector",
}

// labelMaps is the caches' table of label maps. It keeps a map nobody
// looked up for between one and two periods of 10 minutes.
var labelMaps = newMapTable(10*time.Minute, time.Now)

// mapTable hands out one map for each distinct content it is shown, so
// that the cached objects of a cluster hold their equal label maps once (a
// map of a few labels costs some 300 bytes, its strings apart).
//
// The maps it hands out are shared by the objects that hold them: like
// every cached object, they must not be modified (client-go's contract
// for its caches: DeepCopy before changing).
type mapTable struct {
	seed maphash.Seed

	mu   sync.Mutex
	maps generations[uint64, map[string]string] // by content's hash
}

func newMapTable(period time.Duration, now func() time.Time) *mapTable {
	return &mapTable{seed: maphash.MakeSeed(), maps: newGenerations[uint64, map[string]string](period, now)}
}

// lookup returns the table's map equal to m, or nil.
func (t *mapTable) lookup(m map[string]string) map[string]string {
	h := t.hash(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.maps.get(h); ok && maps.Equal(c, m) {
		return c
	}
	return nil
}

// add makes m the table's map of its content, unless a map of the same
// hash is in it (one of another content: m then stays unshared).
func (t *mapTable) add(m map[string]string) {
	h := t.hash(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.maps.get(h); !ok {
		t.maps.put(h, m)
	}
}

// len returns the number of maps the table holds.
func (t *mapTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maps.len()
}

// hash is the same for maps of equal content, whatever their iteration
// order: the sum of each entry's hash.
func (t *mapTable) hash(m map[string]string) uint64 {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(t.seed)
	for k, v := range m {
		h.Reset()
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
	}
	return sum
}

// generations is a table that forgets: its entries live in two
// generations, and one got or put in neither the current period nor the
// one before is dropped. The caches' tables use it to keep what the
// objects decoded lately share, and not what objects long deleted held:
// an entry still held by a cached object but looked up by none for two
// periods is dropped from the table, not from the object; a later equal
// value starts a new entry. It is not safe for concurrent use.
type generations[K comparable, V any] struct {
	period   time.Duration
	now      func() time.Time
	cur, old map[K]V
	turned   time.Time // when cur began
}

func newGenerations[K comparable, V any](period time.Duration, now func() time.Time) generations[K, V] {
	return generations[K, V]{period: period, now: now, cur: map[K]V{}, turned: now()}
}

// get returns k's value, moving it to the current generation.
func (g *generations[K, V]) get(k K) (V, bool) {
	g.turn()
	if v, ok := g.cur[k]; ok {
		return v, true
	}
	v, ok := g.old[k]
	if ok {
		g.cur[k] = v
		delete(g.old, k)
	}
	return v, ok
}

// put sets k's value in the current generation.
func (g *generations[K, V]) put(k K, v V) {
	g.turn()
	g.cur[k] = v
}

// len returns the number of entries of both generations.
func (g *generations[K, V]) len() int { return len(g.cur) + len(g.old) }

// turn starts a new generation once a period has passed since the
// current one began, dropping the one before it.
func (g *generations[K, V]) turn() {
	now := g.now()
	elapsed := now.Sub(g.turned)
	if elapsed < g.period {
		return
	}
	g.old, g.cur, g.turned = g.cur, make(map[K]V, len(g.cur)), now
	if elapsed >= 2*g.period {
		// Nothing was got or put in the period before: what the
		// current generation held is as old as the one before.
		g.old = nil
	}
}
