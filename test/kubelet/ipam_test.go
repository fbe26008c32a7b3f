package kubelet

import (
	"errors"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestParsePodCIDR(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "127.1.7.0/24", want: "127.1.7.0/24"},
		{in: "127.1.7.9/24", want: "127.1.7.0/24"},
		{in: "10.245.0.0/16", want: "10.245.0.0/16"},
		{in: "127.1.7.0/29", want: "127.1.7.0/29"},
		{in: "127.1.7.0/30", wantErr: true},
		{in: "fd00::/64", wantErr: true},
		{in: "0.0.0.0/8", wantErr: true},
		{in: "127.1.7.0", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parsePodCIDR(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parsePodCIDR(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if !tc.wantErr && got.String() != tc.want {
				t.Errorf("parsePodCIDR(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestLowestFree(t *testing.T) {
	set := func(addrs ...string) func(netip.Addr) bool {
		m := map[netip.Addr]bool{}
		for _, a := range addrs {
			m[netip.MustParseAddr(a)] = true
		}
		return func(a netip.Addr) bool { return m[a] }
	}
	none := set()
	all := func(netip.Addr) bool { return true }
	for _, tc := range []struct {
		name           string
		prefix         string
		used, bindable func(netip.Addr) bool
		want           string // "" for errNoFreeIP
	}{
		{name: "skips network and first address", prefix: "127.1.7.0/24", used: none, bindable: all, want: "127.1.7.2"},
		{name: "skips used", prefix: "127.1.7.0/24", used: set("127.1.7.2", "127.1.7.3"), bindable: all, want: "127.1.7.4"},
		{name: "fills a hole", prefix: "127.1.7.0/24", used: set("127.1.7.2", "127.1.7.4"), bindable: all, want: "127.1.7.3"},
		{
			name: "skips addresses another plane holds", prefix: "127.1.7.0/24", used: set("127.1.7.2"),
			bindable: func(a netip.Addr) bool { return !set("127.1.7.3", "127.1.7.4")(a) }, want: "127.1.7.5",
		},
		{name: "never 127.0.0.1", prefix: "127.0.0.0/24", used: none, bindable: all, want: "127.0.0.2"},
		{name: "never the broadcast", prefix: "127.1.7.0/29", used: set("127.1.7.2", "127.1.7.3", "127.1.7.4", "127.1.7.5"), bindable: all, want: "127.1.7.6"},
		{name: "full", prefix: "127.1.7.0/29", used: set("127.1.7.2", "127.1.7.3", "127.1.7.4", "127.1.7.5", "127.1.7.6"), bindable: all, want: ""},
		{name: "nothing bindable", prefix: "127.1.7.0/29", used: none, bindable: func(netip.Addr) bool { return false }, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lowestFree(netip.MustParsePrefix(tc.prefix), tc.used, tc.bindable)
			if tc.want == "" {
				if !errors.Is(err, errNoFreeIP) {
					t.Fatalf("lowestFree = %v, %v; want errNoFreeIP", got, err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("lowestFree = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestIPPool(t *testing.T) {
	type step struct {
		uid     types.UID
		current string // the pod's status.podIP
		release bool   // instead of acquiring: release what uid holds
		want    string
	}
	for _, tc := range []struct {
		name   string
		others map[string]types.UID // addresses in status.podIP of pods without an instance
		steps  []step
	}{
		{
			name: "lowest free, in order",
			steps: []step{
				{uid: "a", want: "127.1.7.2"},
				{uid: "b", want: "127.1.7.3"},
				{uid: "a", want: "127.1.7.2"}, // asked again: the same
			},
		},
		{
			name: "a pod keeps its IP",
			steps: []step{
				{uid: "a", current: "127.1.7.9", want: "127.1.7.9"},
				{uid: "b", want: "127.1.7.2"},
			},
		},
		{
			name:   "addresses of pods seen in the cache are taken",
			others: map[string]types.UID{"127.1.7.2": "old"},
			steps: []step{
				{uid: "a", want: "127.1.7.3"},
				{uid: "old", current: "127.1.7.2", want: "127.1.7.2"},
			},
		},
		{
			name: "a released address is handed out again",
			steps: []step{
				{uid: "a", want: "127.1.7.2"},
				{uid: "b", want: "127.1.7.3"},
				{uid: "a", release: true},
				{uid: "c", want: "127.1.7.2"},
			},
		},
		{
			name: "release by another uid is ignored",
			steps: []step{
				{uid: "a", want: "127.1.7.2"},
				{uid: "b", release: true},
				{uid: "c", want: "127.1.7.3"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newIPPool(netip.MustParsePrefix("127.1.7.0/24"), func(uid types.UID, a netip.Addr) bool {
				owner, ok := tc.others[a.String()]
				return ok && owner != uid
			})
			p.bindable = func(netip.Addr) bool { return true }
			for i, s := range tc.steps {
				if s.release {
					p.release(s.uid)
					continue
				}
				got, err := p.acquire(s.uid, s.current)
				if err != nil || got.String() != s.want {
					t.Fatalf("step %d: acquire(%s, %q) = %v, %v; want %s", i, s.uid, s.current, got, err, s.want)
				}
			}
		})
	}
}
