package operator

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

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
// the soft limit to MemoryLimitPercent of it less the process's resident
// file-backed memory: the pages of the binary the kernel has read in
// (its text, its read-only data, the tables the runtime reads to walk
// stacks), which count in RSS and in the container's memory but not in
// Go's limit. They grow as the code that runs is touched, so pgloop reads
// them again every fileCheck (RssFile in /proc/self/status) and moves the
// soft limit with them. At 10,000 clusters they were 73 MB of the 500 MB
// RSS, with the soft limit at 90 % of 500 MB: RSS went 0.8 MB over
// (docs/scale.md). The rest of the limit is room for the collector to
// catch up. GOMEMLIMIT, Go's own setting, wins when the environment sets
// it.

// MemoryLimitPercent is the share of --memory-limit Go's soft memory
// limit is set to, before the resident file-backed memory is taken off.
const MemoryLimitPercent = 95

// fileCheck is how often the resident file-backed memory is read again.
const fileCheck = 15 * time.Second

// fileMoved is how far the resident file-backed memory must move before
// the soft limit follows it.
const fileMoved = 1 << 20

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
// operator's --memory-limit, gomemlimit, the environment's GOMEMLIMIT, and
// file, the process's resident file-backed memory. It returns the limit
// to set, 0 for none (the runtime's own stays), and why, for the log:
//
//  1. GOMEMLIMIT is set (not empty): the runtime read it at start, it
//     stays.
//  2. A limit is given: MemoryLimitPercent of it less file, never below
//     half the limit (a binary mapped in whole would otherwise leave the
//     heap nothing).
//  3. Otherwise none.
func softMemoryLimit(limit Bytes, gomemlimit string, file int64) (soft int64, why string) {
	switch {
	case gomemlimit != "":
		return 0, fmt.Sprintf("GOMEMLIMIT=%s from the environment (--memory-limit %d not used)", gomemlimit, limit)
	case limit > 0:
		soft = max(int64(limit)/100*MemoryLimitPercent-file, int64(limit)/2)
		return soft, fmt.Sprintf("%d%% of --memory-limit %d less %d bytes of resident file-backed memory", MemoryLimitPercent, limit, file)
	default:
		return 0, "--memory-limit 0 and no GOMEMLIMIT"
	}
}

// setMemoryLimit sets Go's soft memory limit as softMemoryLimit decides,
// with the resident file-backed memory read now, and logs the limit in
// effect. It returns whether it set one (keepMemoryLimit keeps it).
func setMemoryLimit(limit Bytes, gomemlimit string, log logrus.FieldLogger) bool {
	soft, why := softMemoryLimit(limit, gomemlimit, residentFile())
	if soft > 0 {
		debug.SetMemoryLimit(soft)
	}
	// A negative value reads the limit without changing it.
	var inEffect any = debug.SetMemoryLimit(-1)
	if inEffect == int64(math.MaxInt64) {
		inEffect = "none"
	}
	log.WithFields(logrus.Fields{"softMemoryLimit": inEffect, "reason": why}).Info("Go's soft memory limit")
	return soft > 0
}

// keepMemoryLimit moves the soft limit setMemoryLimit set with the
// resident file-backed memory, read by file every period (residentFile
// every fileCheck in the operator), until ctx is done.
func keepMemoryLimit(ctx context.Context, limit Bytes, period time.Duration, file func() int64, log logrus.FieldLogger) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	last := file()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f := file()
		if max(f-last, last-f) < fileMoved {
			continue
		}
		last = f
		soft, why := softMemoryLimit(limit, "", f)
		debug.SetMemoryLimit(soft)
		log.WithFields(logrus.Fields{"softMemoryLimit": soft, "reason": why}).Debug("Go's soft memory limit moved")
	}
}

// residentFile returns the process's resident file-backed memory in
// bytes, 0 when /proc does not say.
func residentFile() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return rssFile(string(b))
}

// rssFile returns the RssFile line of a /proc/<pid>/status text, in
// bytes, 0 when it has none.
func rssFile(status string) int64 {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "RssFile:")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		if n, err := strconv.ParseInt(strings.TrimSpace(kb), 10, 64); ok && err == nil {
			return n << 10
		}
		return 0
	}
	return 0
}
