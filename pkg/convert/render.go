package convert

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/pgloop/pgloop/pkg/cluster"
)

// ErrRefused is wrapped by Render's error when pgloop's validation refuses
// values of the converted manifests.
var ErrRefused = errors.New("pgloop would refuse values of the converted manifests")

// Render returns the conversions as YAML documents separated by "---", each
// under its comment block. yaml.Marshal sorts the keys, so the output is the
// same for the same input. When pgloop's validation refuses values that were
// kept, Render returns the documents and an error wrapping ErrRefused that
// lists them by source and cluster name: they are to be fixed before the
// manifests are applied.
func Render(convs []*Conversion) ([]byte, error) {
	var buf bytes.Buffer
	var refused []string
	for i, c := range convs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		data, err := c.render()
		if err != nil {
			return nil, err
		}
		buf.Write(data)
		for _, r := range c.refused {
			refused = append(refused, fmt.Sprintf("  %s (%s): %s", c.source, c.name, r))
		}
	}
	if len(refused) > 0 {
		return buf.Bytes(), fmt.Errorf("%w (they are kept, marked REFUSED; fix them before applying):\n%s",
			ErrRefused, strings.Join(refused, "\n"))
	}
	return buf.Bytes(), nil
}

// render writes the manifest under its comment block.
func (c *Conversion) render() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Converted by pgloop convert from %s %s (%s).\n", zalandoAPIVersion, zalandoKind, c.source)
	if c.adopt {
		c.renderAdopt(&b)
	} else {
		fmt.Fprintf(&b, "# Secrets: pgloop names a role's credentials Secret %s\n", cluster.SecretName("<user>", "<cluster>"))
		fmt.Fprintf(&b, "# (zalando: %s) and makes new passwords; this cluster's:\n", cluster.ZalandoSecretName("<user>", "<cluster>"))
		for _, u := range c.users {
			fmt.Fprintf(&b, "#   %s\n", cluster.SecretName(u, c.name))
		}
	}
	for _, d := range c.dropped {
		fmt.Fprintf(&b, "# dropped: %s\n", d)
	}
	for _, d := range c.changed {
		fmt.Fprintf(&b, "# changed: %s\n", d)
	}
	for _, r := range c.refused {
		fmt.Fprintf(&b, "# REFUSED by pgloop's validation, kept: %s\n", r)
	}
	data, err := yaml.Marshal(c.object)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.source, err)
	}
	b.Write(data)
	return b.Bytes(), nil
}
