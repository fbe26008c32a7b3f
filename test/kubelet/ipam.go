package kubelet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Ports every instance listens on, at its own pod IP.
const (
	postgresPort = 5432
	patroniPort  = 8008
)

// errNoFreeIP is returned when every address of the pod CIDR is taken.
var errNoFreeIP = errors.New("no free pod IP")

// parsePodCIDR checks the --pod-cidr: IPv4, and with room for at least one
// pod once the network, first and broadcast addresses are set aside.
func parsePodCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("pod CIDR %q: %w", s, err)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("pod CIDR %q: only IPv4 is supported", s)
	}
	if p.Bits() > 29 {
		return netip.Prefix{}, fmt.Errorf("pod CIDR %q: too small, use /29 or larger", s)
	}
	p = p.Masked()
	if p.Contains(netip.IPv4Unspecified()) {
		return netip.Prefix{}, fmt.Errorf("pod CIDR %q contains 0.0.0.0", s)
	}
	return p, nil
}

// candidate reports whether addr of prefix may ever be a pod IP: never the
// network address, the first address (a gateway's, by convention), the
// broadcast address, or 127.0.0.1, where the control plane and everything
// else on the host listen.
func candidate(prefix netip.Prefix, addr netip.Addr) bool {
	if !prefix.Contains(addr) || addr == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		return false
	}
	network := prefix.Addr()
	if addr == network || addr == network.Next() {
		return false
	}
	return prefix.Contains(addr.Next()) // the last address is the broadcast
}

// lowestFree returns the lowest candidate address of prefix that used does
// not claim and bindable accepts. bindable is asked last: it probes the
// host.
func lowestFree(prefix netip.Prefix, used, bindable func(netip.Addr) bool) (netip.Addr, error) {
	for addr := prefix.Addr(); prefix.Contains(addr); addr = addr.Next() {
		if candidate(prefix, addr) && !used(addr) && bindable(addr) {
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w in %s", errNoFreeIP, prefix)
}

// canBind reports whether both instance ports can be bound at addr right
// now: other planes, or a process this kubelet lost track of, may hold them.
func canBind(addr netip.Addr) bool {
	for _, port := range []int{postgresPort, patroniPort} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// ipPool tracks the pod IPs this kubelet has handed out.
type ipPool struct {
	prefix netip.Prefix
	// others reports addresses held by pods of the node that have no
	// instance yet (a restarted kubelet finds them in status.podIP).
	others   func(uid types.UID, addr netip.Addr) bool
	bindable func(netip.Addr) bool

	mu    sync.Mutex
	inUse map[netip.Addr]types.UID
}

func newIPPool(prefix netip.Prefix, others func(types.UID, netip.Addr) bool) *ipPool {
	return &ipPool{prefix: prefix, others: others, bindable: canBind, inUse: map[netip.Addr]types.UID{}}
}

// acquire returns the pod's IP: current if the pod already has one (a pod IP
// never changes), else the lowest free address.
func (p *ipPool) acquire(uid types.UID, current string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if current != "" {
		addr, err := netip.ParseAddr(current)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("status.podIP %q: %w", current, err)
		}
		p.inUse[addr] = uid
		return addr, nil
	}
	for addr, owner := range p.inUse {
		if owner == uid {
			return addr, nil
		}
	}
	addr, err := lowestFree(p.prefix, func(a netip.Addr) bool {
		_, taken := p.inUse[a]
		return taken || p.others(uid, a)
	}, p.bindable)
	if err != nil {
		return netip.Addr{}, err
	}
	p.inUse[addr] = uid
	return addr, nil
}

// release gives back the address uid holds, if any.
func (p *ipPool) release(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, owner := range p.inUse {
		if owner == uid {
			delete(p.inUse, addr)
		}
	}
}
