package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pgloop/pgloop/test/pgtest"
)

// What pkg/operator logs when a replica starts to lead.
const logLeading = "leading: starting the clusters"

// operator is one `pgloop operator` process of a run.
type operator struct {
	*pgtest.Operator
	name string

	mu      sync.Mutex
	leading bool
}

// startOperator runs one more operator: the run's namespaces, through the
// proxy, its health server on a free port, JSON logs into the run's
// directory.
func (r *run) startOperator() (*operator, error) {
	r.mu.Lock()
	r.started++
	name := fmt.Sprintf("op-%02d", r.started)
	r.mu.Unlock()
	// A deleted cluster leaves nothing (Judge counts what is left as
	// orphans): its Secrets and claims go with it.
	args := []string{"operator", "--kubeconfig", r.kubeconfig, "--health-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info",
		"--volume-retention", "Delete"}
	for i := range r.cfg.Workload.Namespaces {
		args = append(args, "--namespace", Namespace(i))
	}
	args = append(args, r.operatorFlags...)
	args = append(args, r.cfg.OperatorArgs...)
	o := &operator{name: name}
	p, err := pgtest.StartOperator(r.cfg.Pgloop, args, filepath.Join(r.dir, name+".log"), func(line string) {
		if strings.Contains(line, logLeading) {
			o.mu.Lock()
			o.leading = true
			o.mu.Unlock()
			r.operatorChanged()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("while starting operator %s: %w", name, err)
	}
	o.Operator = p
	go func() {
		<-p.Exited()
		r.operatorChanged()
	}()
	r.mu.Lock()
	r.operators = append(r.operators, o)
	r.mu.Unlock()
	return o, nil
}

func (r *run) operatorChanged() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.opChanged)
	r.opChanged = make(chan struct{})
}

func (o *operator) isLeading() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leading
}

func (o *operator) exited() bool {
	select {
	case <-o.Exited():
		return true
	default:
		return false
	}
}

// waitLeader waits until a live operator other than not has logged that
// it leads, and returns it. An operator that exits on its own (it lost
// its lease, or failed) is an error: the run is there to see that.
func (r *run) waitLeader(ctx context.Context, not *operator) (*operator, error) {
	for {
		r.mu.Lock()
		ops, ch := r.operators, r.opChanged
		r.mu.Unlock()
		for _, o := range ops {
			if o != not && !o.exited() && o.isLeading() {
				return o, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), errors.New("no operator leads"))
		}
	}
}
