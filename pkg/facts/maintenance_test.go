package facts

import (
	"strings"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// The maintenance windows are read with the time of the observation: the
// facts say they are closed, and when the next opens, or nothing.
func TestMaintenanceFacts(t *testing.T) {
	pg := newPG("c1", 1)
	d := NewDeriver(cluster.Options{}, true)
	objs := objects(pg, statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master))
	if f := d.Facts(objs, now); f.MaintenanceWait != "" || !f.MaintenanceOpens.IsZero() {
		t.Errorf("no windows: wait %q, opens %v", f.MaintenanceWait, f.MaintenanceOpens)
	}

	windowed := pg.DeepCopy()
	windowed.Generation++
	open := now.UTC().Add(time.Hour).Truncate(time.Minute)
	from := open.Format("15:04")
	to := open.Add(time.Hour).Format("15:04")
	if open.Add(time.Hour).Day() != open.Day() {
		t.Skip("the test's window would wrap past midnight")
	}
	windowed.Spec.MaintenanceWindows = []v1.MaintenanceWindow{v1.MaintenanceWindow(from + "-" + to)}
	objs.Postgresql = windowed
	f := d.Facts(objs, now)
	if !f.MaintenanceOpens.Equal(open) || !strings.Contains(f.MaintenanceWait, "the next opens at "+open.Format(time.RFC3339)) {
		t.Errorf("window %s-%s at %v: wait %q, opens %v; want it closed until %v", from, to, now, f.MaintenanceWait, f.MaintenanceOpens, open)
	}
	if f := d.Facts(objs, open.Add(time.Minute)); f.MaintenanceWait != "" {
		t.Errorf("inside the window: wait %q", f.MaintenanceWait)
	}
}
