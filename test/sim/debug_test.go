package sim

import (
	"fmt"
	"testing"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/facts"
)

func TestDebug(t *testing.T) {
	s := newSim(502, Options{Active: 20 * 60e9, Quiet: 30 * 60e9, Trace: 100000})
	s.run()
	sts, _ := s.op.view.StatefulSet("ns0", "pg1")
	fmt.Println("view sts", sts.Generation, sts.Status.ObservedGeneration, cluster.PodTemplateHash(sts), *sts.Spec.Replicas)
	for _, p := range s.op.view.Pods("ns0/pg1") {
		fmt.Println("view pod", p.Name, p.UID, cluster.PodTemplateHash(p), p.Status.Phase, p.Labels[cluster.LabelRole], p.DeletionTimestamp)
	}
	objs, _ := s.op.view.Objects("ns0/pg1")
	d := facts.NewDeriver(cluster.Options{Image: images[0]}, true)
	f := d.Facts(objs, s.clock.Now())
	fmt.Printf("facts %+v\n", f)
	fmt.Printf("spec %+v\n", objs.Postgresql.Spec)
	fmt.Println("compare", cluster.Compare(sts, cluster.StatefulSet(objs.Postgresql, cluster.Options{Image: images[0]})))
}
