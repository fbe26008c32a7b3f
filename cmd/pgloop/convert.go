package main

import (
	"errors"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/convert"
)

func newConvertCmd() *cobra.Command {
	var adopt bool
	cmd := &cobra.Command{
		Use:   "convert [FILE...]",
		Short: "Convert zalando postgres-operator manifests (acid.zalan.do/v1 postgresql) to pgloop's",
		Long: "Read zalando postgres-operator manifests (acid.zalan.do/v1, kind postgresql, or a List of\n" +
			"them as `kubectl get -o yaml` prints) from the FILEs, or from standard input when there is none\n" +
			"or FILE is -, and print pgloop ones (pgloop.dev/v1, kind Postgresql) as YAML documents. A\n" +
			"comment block above each says which fields were dropped or changed and why, and the names of\n" +
			"the cluster's credentials Secrets, which differ from zalando's.\n\n" +
			"Exit status: 0 when every manifest converted. 1 and nothing printed when a document is not a\n" +
			"zalando postgresql or cannot be read (each error names the file and document number). 1 with\n" +
			"the output printed when pgloop's validation refuses values that were kept: each is marked\n" +
			"REFUSED in its manifest's comments; fix them before applying.\n\n" +
			"With --adopt the manifests take over the running zalando clusters of their names, pods,\n" +
			"volumes and passwords, without restarting a pod (annotation pgloop.dev/adopt); stop the\n" +
			"zalando operator and delete its postgresql with --cascade=orphan first (docs/migrating.md,\n" +
			"Adopt in place).",
		Example: "  pgloop convert acid-db.yaml > db.yaml\n" +
			"  kubectl get postgresql -n prod -o yaml | pgloop convert > prod.yaml\n" +
			"  kubectl get postgresql acid-db -o yaml | pgloop convert --adopt > db.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(cmd.OutOrStdout(), cmd.InOrStdin(), args, adopt)
		},
	}
	cmd.Flags().BoolVar(&adopt, "adopt", false, "take over the running zalando clusters in place (annotation pgloop.dev/adopt)")
	return cmd
}

// runConvert converts the documents of files (stdin for none or "-") and
// writes them to out. Nothing is written when an input cannot be converted.
// When pgloop's validation refuses values, everything is written and the
// error lists them, so the exit status is 1. With adopt the manifests take
// over the running zalando clusters (convert.Adopt).
func runConvert(out io.Writer, stdin io.Reader, files []string, adopt bool) error {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var convs []*convert.Conversion
	var errs []error
	for _, f := range files {
		c, err := convertFile(f, stdin)
		convs = append(convs, c...)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if adopt {
		convert.Adopt(convs)
	}
	data, err := convert.Render(convs)
	if err != nil && !errors.Is(err, convert.ErrRefused) {
		return err
	}
	if _, werr := out.Write(data); werr != nil {
		return werr
	}
	return err
}

// convertFile converts the documents of one input: the file, or stdin for
// "-".
func convertFile(file string, stdin io.Reader) ([]*convert.Conversion, error) {
	if file == "-" {
		return convert.Convert("stdin", stdin)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return convert.Convert(file, f)
}
