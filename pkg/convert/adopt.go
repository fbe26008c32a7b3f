package convert

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// Adopt makes each conversion take over the running zalando cluster of its
// name instead of starting a new one (`pgloop convert --adopt`): it sets
// the annotation v1.AnnotationAdopt, and drops spec.clone, which applies
// only to the first start of a new cluster. The comment block then says
// which zalando Secrets pgloop's take their passwords from.
func Adopt(convs []*Conversion) {
	for _, c := range convs {
		c.adopt = true
		meta, _ := c.object["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			c.object["metadata"] = meta
		}
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[v1.AnnotationAdopt] = v1.AdoptZalando
		if spec, ok := c.object["spec"].(map[string]any); ok {
			if _, ok := spec["clone"]; ok {
				delete(spec, "clone")
				c.drop("spec.clone", "the adopted cluster runs already: a clone applies only to a new cluster's first start")
				c.changed = slices.DeleteFunc(c.changed, func(s string) bool { return strings.HasPrefix(s, "spec.clone") })
			}
		}
	}
}

// renderAdopt writes the comments of an adopting manifest about the
// Secrets.
func (c *Conversion) renderAdopt(b *bytes.Buffer) {
	fmt.Fprintf(b, "# Adopt: pgloop takes over the running zalando cluster %s without restarting a pod\n", c.name)
	fmt.Fprintf(b, "# (annotation %s; the order of steps is in docs/migrating.md, Adopt in place).\n", v1.AnnotationAdopt)
	fmt.Fprintf(b, "# Secrets: pgloop's are made with the passwords of zalando's, which are left as they are:\n")
	for _, u := range c.users {
		fmt.Fprintf(b, "#   %s from %s\n", cluster.SecretName(u, c.name), cluster.ZalandoSecretName(u, c.name))
	}
}
