package fsm

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/fsm.md from the state machine, and the scripts' expected outputs (testdata/*.txt)")

// TestDocsMatchMachine keeps docs/fsm.md generated from the table.
func TestDocsMatchMachine(t *testing.T) {
	const path = "../../docs/fsm.md"
	want := Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make generate`)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date: run `make generate` (or go test ./pkg/fsm -update)", path)
	}
}

func TestEveryStateAndEventDocumented(t *testing.T) {
	for _, s := range States {
		if stateDocs[s] == "" {
			t.Errorf("state %s has no documentation", s)
		}
	}
	for _, e := range documentedEvents() {
		if eventDocs[e] == "" {
			t.Errorf("event %s has no documentation", e)
		}
	}
	if len(eventDocs) != len(documentedEvents()) {
		t.Errorf("%d documented events, %d in the table or recorded", len(eventDocs), len(documentedEvents()))
	}
}

func TestMermaidMarksCurrentState(t *testing.T) {
	d := Mermaid(Degraded)
	if !strings.HasPrefix(d, "stateDiagram-v2\n") || !strings.Contains(d, "class Degraded current") {
		t.Errorf("diagram:\n%s", d)
	}
	if !strings.Contains(d, "Creating --> Running: podsReady [all pods Ready, primary elected, objects converged, roles and configuration applied, volumes grown, connection poolers ready and none paused by pgloop (status.poolerPause), the last ensure done and succeeded]") {
		t.Errorf("diagram lacks the podsReady edge:\n%s", d)
	}
	if strings.Contains(Mermaid(""), "class ") {
		t.Error("no state should be marked")
	}
}

// TestPlanStepsDocumented: every field of Plan that asks for work is a
// step of docs/fsm.md's table of plans.
func TestPlanStepsDocumented(t *testing.T) {
	documented := map[string]bool{}
	for _, p := range planSteps {
		documented[p.field] = true
	}
	// Not work: what identifies or orders the plan, or qualifies a part.
	notWork := map[string]bool{"ID": true, "Urgent": true, "Continues": true, "KeepPodTemplate": true}
	typ := reflect.TypeOf(Plan{})
	for i := range typ.NumField() {
		if f := typ.Field(i).Name; !notWork[f] && !documented[f] {
			t.Errorf("Plan.%s is no step of planSteps (docs/fsm.md)", f)
		}
	}
}
