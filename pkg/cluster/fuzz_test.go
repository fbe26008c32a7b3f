package cluster_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/internal/samples"
)

// fuzzSeeds returns the manifests FuzzBuild starts from: the samples, make
// run's own cluster and the cluster of the controller's test fixtures.
// testdata/fuzz/FuzzBuild holds the other seeds and the inputs that once
// failed.
func fuzzSeeds(f *testing.F) [][]byte {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	var seeds [][]byte
	for _, name := range []string{"manifests/samples/minimal.yaml", "manifests/samples/full.yaml", "hack/samples/local.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	fixture, err := yaml.Marshal(fixtures.NewPG("fixture", 3))
	if err != nil {
		f.Fatal(err)
	}
	return append(seeds, fixture)
}

// FuzzBuild decodes a manifest, names the cluster name when name is not
// empty, and builds every object of each cluster that passes pgloop's
// validation. It checks that building does not panic or fail, that it is
// deterministic, that the objects are those Names lists, that the cluster
// as the apiserver hands it back (through JSON) builds the same objects, and
// that every object passes the apiserver's validation of the fields pgloop
// derives from the spec (apiCheck): a spec pgloop accepts must never make
// objects the apiserver refuses.
func FuzzBuild(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, "")
	}
	f.Fuzz(func(t *testing.T, manifest []byte, name string) {
		pg := &v1.Postgresql{}
		if err := yaml.Unmarshal(manifest, pg); err != nil {
			return
		}
		if name != "" {
			pg.Name = name
		}
		pg.Namespace, pg.UID = "db", samples.UID
		if len(pg.Validate()) > 0 {
			return
		}

		objs := build(t, pg)
		if again := build(t, pg); !reflect.DeepEqual(objs, again) {
			t.Fatalf("Build is not deterministic:\n%s\n%s", dump(objs), dump(again))
		}
		if got, want := builtNames(objs), cluster.Names(pg); !reflect.DeepEqual(got, want) {
			t.Fatalf("Names says %+v, Build made %+v", want, got)
		}
		if c := cluster.Compare(objs.StatefulSet, objs.StatefulSet); c != cluster.NoChange {
			t.Fatalf("Compare of the StatefulSet with itself: %v", c)
		}

		stored, err := json.Marshal(pg)
		if err != nil {
			t.Fatal(err)
		}
		served := &v1.Postgresql{}
		if err := json.Unmarshal(stored, served); err != nil {
			t.Fatalf("decode the cluster's own JSON: %v", err)
		}
		if errs := served.Validate(); len(errs) > 0 {
			t.Fatalf("the cluster is invalid once through JSON: %v", errs.ToAggregate())
		}
		if c := cluster.Compare(objs.StatefulSet, build(t, served).StatefulSet); c != cluster.NoChange {
			t.Fatalf("the cluster through JSON asks for a change of its StatefulSet: %v", c)
		}
		if got, want := cluster.BootstrapConfig(objs.StatefulSet), cluster.Dynamic(pg).JSON(); got != want {
			t.Fatalf("the StatefulSet bootstraps with %s, the dynamic configuration is %s", got, want)
		}

		if errs := apiCheck(objs); len(errs) > 0 {
			t.Fatalf("the apiserver would refuse what a valid cluster builds:\n%v\nspec: %s", errs.ToAggregate(), stored)
		}
	})
}

func build(t *testing.T, pg *v1.Postgresql) *cluster.Objects {
	t.Helper()
	objs, err := cluster.Build(pg, cluster.Options{}, samples.Seeded(1))
	if err != nil {
		t.Fatalf("build a valid cluster: %v", err)
	}
	return objs
}

func builtNames(o *cluster.Objects) cluster.ObjectNames {
	n := cluster.ObjectNames{
		StatefulSet:         o.StatefulSet.Name,
		PodDisruptionBudget: o.PodDisruptionBudget.Name,
		ServiceAccount:      o.ServiceAccount.Name,
		Role:                o.Role.Name,
		RoleBinding:         o.RoleBinding.Name,
	}
	for _, s := range o.Services {
		n.Services = append(n.Services, s.Name)
	}
	for _, s := range o.Secrets {
		n.Secrets = append(n.Secrets, s.Name)
	}
	return n
}

func dump(o *cluster.Objects) string {
	b, _ := json.Marshal(o)
	return string(b)
}
