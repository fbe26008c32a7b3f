package reqclass

import (
	"context"
	"testing"
)

// A mark is read back from the context it was set on and from those
// derived from it; a context never marked reads as Unmarked and no class.
func TestMarks(t *testing.T) {
	bg := context.Background()
	if p, c := PriorityOf(bg), WriteClassOf(bg); p != Unmarked || c != "" {
		t.Errorf("unmarked context: priority %v, class %q; want Unmarked and none", p, c)
	}
	ctx := WithWriteClass(WithPriority(bg, Urgent), "headless")
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	if p, c := PriorityOf(derived), WriteClassOf(derived); p != Urgent || c != "headless" {
		t.Errorf("marked context: priority %v, class %q; want Urgent and headless", p, c)
	}
	if p := PriorityOf(WithPriority(ctx, Background)); p != Background {
		t.Errorf("marked again: priority %v, want Background", p)
	}
}
