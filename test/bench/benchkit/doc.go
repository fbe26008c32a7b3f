package benchkit

import (
	"fmt"
	"os"
	"strings"
)

// Doc is a Markdown document of benchmark results made of sections, one
// per configuration (its key), each replaced by the next run of the same
// configuration, the rest of the file kept. Its marks are HTML comments
// naming the bench:
//
//	<!-- NAME: begin "KEY" --> … <!-- NAME: end -->
//	<!-- NAME: new configurations go above this line -->
type Doc struct {
	// Name is the bench's name, in the marks.
	Name string
	// Header and Footer make a new document, around the new-runs mark.
	Header, Footer string
}

// Begin is the line that starts the section of key.
func (d Doc) Begin(key string) string { return fmt.Sprintf("<!-- %s: begin %q -->\n", d.Name, key) }

// End is the line that ends a section, without its newline.
func (d Doc) End() string { return fmt.Sprintf("<!-- %s: end -->", d.Name) }

// NewRunsMark is the line above which sections of new keys go.
func (d Doc) NewRunsMark() string {
	return fmt.Sprintf("<!-- %s: new configurations go above this line -->", d.Name)
}

// Update writes section, the one of key (starting with Begin(key) and
// ending with End()), into the document at path: in place of the section
// of the same key, else above the new-runs mark, else at the end. A
// missing file is created from Header and Footer.
func (d Doc) Update(path, key, section string) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		data, err = []byte(d.Header+d.NewRunsMark()+"\n"+d.Footer), nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(d.Replace(string(data), key, section)), 0o644)
}

// Replace puts section, the one of key, into doc.
func (d Doc) Replace(doc, key, section string) string {
	begin := d.Begin(key)
	end := d.End() + "\n"
	if i := strings.Index(doc, begin); i >= 0 {
		if j := strings.Index(doc[i:], end); j >= 0 {
			return doc[:i] + section + doc[i+j+len(end):]
		}
	}
	if i := strings.Index(doc, d.NewRunsMark()); i >= 0 {
		return doc[:i] + section + "\n" + doc[i:]
	}
	if !strings.HasSuffix(doc, "\n") {
		doc += "\n"
	}
	return doc + "\n" + section
}
