package operator

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The soft memory limit (--memory-limit).
//
// Go's collector runs when the heap has grown by GOGC percent (100) since
// the last collection: an operator whose live heap is 400 MB may reach
// 800 MB before it collects, and a container's memory limit kills it
// first. A soft limit (runtime/debug.SetMemoryLimit) makes the collector
// run as the process nears it, whatever GOGC says. The Deployment sets
// PGLOOP_MEMORY_LIMIT from its container's limits.memory, and pgloop sets
// the soft limit to MemoryLimitPercent of it: the rest is what the
// runtime does not count (the binary's text, memory outside Go's heap)
// and room for the collector to catch up. GOMEMLIMIT, Go's own setting,
// wins when the environment sets it.

// MemoryLimitPercent is the share of --memory-limit Go's soft memory
// limit is set to.
const MemoryLimitPercent = 90

// MinMemoryLimit is the smallest --memory-limit but 0: an operator with no
// cluster takes about 80 MiB, so below this the collector would run
// without end (a limit given in MB where bytes were meant).
const MinMemoryLimit = 64 << 20

// Bytes is a size in bytes that parses as a Kubernetes quantity (512Mi,
// 1G, or a number of bytes as the downward API gives a container's
// limits.memory): the type of --memory-limit.
type Bytes int64

// Set parses s as a quantity of whole bytes.
func (b *Bytes) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a quantity of bytes (e.g. 512Mi, 1Gi, 1073741824): %w", s, err)
	}
	// Value rounds up, and saturates at math.MaxInt64.
	switch v := q.Value(); {
	case v == math.MaxInt64:
		return fmt.Errorf("%q is too large", s)
	case q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) != 0:
		return fmt.Errorf("%q is not a whole number of bytes", s)
	default:
		*b = Bytes(v)
	}
	return nil
}

// String returns the number of bytes.
func (b *Bytes) String() string { return strconv.FormatInt(int64(*b), 10) }

// Type names the flag's type in --help.
func (b *Bytes) Type() string { return "quantity" }

// softMemoryLimit decides Go's soft memory limit from limit, the
// operator's --memory-limit, and gomemlimit, the environment's GOMEMLIMIT.
// It returns the limit to set, 0 for none (the runtime's own stays), and
// why, for the log:
//
//  1. GOMEMLIMIT is set (not empty): the runtime read it at start, it
//     stays.
//  2. A limit is given: MemoryLimitPercent of it.
//  3. Otherwise none.
func softMemoryLimit(limit Bytes, gomemlimit string) (soft int64, why string) {
	switch {
	case gomemlimit != "":
		return 0, fmt.Sprintf("GOMEMLIMIT=%s from the environment (--memory-limit %d not used)", gomemlimit, limit)
	case limit > 0:
		return int64(limit) / 100 * MemoryLimitPercent, fmt.Sprintf("%d%% of --memory-limit %d", MemoryLimitPercent, limit)
	default:
		return 0, "--memory-limit 0 and no GOMEMLIMIT"
	}
}

// setMemoryLimit sets Go's soft memory limit as softMemoryLimit decides
// and logs the limit in effect.
func setMemoryLimit(limit Bytes, gomemlimit string, log logrus.FieldLogger) {
	soft, why := softMemoryLimit(limit, gomemlimit)
	if soft > 0 {
		debug.SetMemoryLimit(soft)
	}
	// A negative value reads the limit without changing it.
	var inEffect any = debug.SetMemoryLimit(-1)
	if inEffect == int64(math.MaxInt64) {
		inEffect = "none"
	}
	log.WithFields(logrus.Fields{"softMemoryLimit": inEffect, "reason": why}).Info("Go's soft memory limit")
}
