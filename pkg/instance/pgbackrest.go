package instance

// pgBackRest's configuration in the container's environment (PGBACKREST_*),
// as Patroni, PostgreSQL and archive_command get it.

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// pgBackRestEnvPrefix starts every environment variable pgBackRest reads as
// an option: PGBACKREST_REPO1_PATH is --repo1-path.
const pgBackRestEnvPrefix = "PGBACKREST_"

// pathKind says where the path an option names lives.
type pathKind int

const (
	// notPath: a name that looks like one but is not (log-level-file).
	notPath pathKind = iota
	// localPath: a file or directory of the container's filesystem,
	// mapped, outside a container, through the pod's volumes.
	localPath
	// pgLocalPath: local unless PG<n>_HOST names a remote PostgreSQL
	// host, whose path it then is.
	pgLocalPath
	// repoLocalPath: repo<n>-path, local for a posix or cifs repository
	// (REPO<n>_TYPE unset means posix) that has no REPO<n>_HOST; for s3,
	// gcs and azure it is a path in the bucket, for a repository host a
	// path there.
	repoLocalPath
	// gcsKeyPath: repo<n>-gcs-key, a local file for the key type service
	// (the default), a token for the type token.
	gcsKeyPath
	// otherPath: not of this filesystem (a path on a remote host), or a
	// program of the image, which a machine running pods as processes has
	// at the same path (Debian's
	// pgbackrest, like the image's): kept as written.
	otherPath
)

// pgBackRestPaths lists pgBackRest 2.45's options whose value is a path, as
// their environment variable without PGBACKREST_, <n> standing for the
// index of the indexed ones (PG1_PATH, REPO2_S3_CA_FILE). The one place that
// decides which PGBACKREST_* values are translated: an option naming a path
// that is not listed here (its name ends in _PATH, _FILE or CONFIG) is an
// error rather than a path passed through unseen. Of the deprecated names
// only the CA options' are listed (REPO<n>_S3_CA_*, REPO<n>_AZURE_CA_*);
// others (DB_PATH...) are errors. Options read from a configuration file
// (PGBACKREST_CONFIG) are not translated: give local paths in the
// environment.
var pgBackRestPaths = map[string]pathKind{
	"CONFIG":              localPath,
	"CONFIG_PATH":         localPath,
	"CONFIG_INCLUDE_PATH": localPath,
	"LOCK_PATH":           localPath,
	"LOG_PATH":            localPath,
	"SPOOL_PATH":          localPath,
	"LOG_LEVEL_FILE":      notPath, // a log level

	"PG<n>_PATH":        pgLocalPath,
	"PG<n>_SOCKET_PATH": pgLocalPath,

	"REPO<n>_PATH":            repoLocalPath,
	"REPO<n>_STORAGE_CA_FILE": localPath,
	"REPO<n>_STORAGE_CA_PATH": localPath,
	"REPO<n>_S3_CA_FILE":      localPath, // deprecated repo<n>-storage-ca-file
	"REPO<n>_S3_CA_PATH":      localPath,
	"REPO<n>_AZURE_CA_FILE":   localPath,
	"REPO<n>_AZURE_CA_PATH":   localPath,
	"REPO<n>_GCS_KEY":         gcsKeyPath,

	// TLS between pgBackRest hosts: this end's certificates are local.
	"REPO<n>_HOST_CA_FILE":   localPath,
	"REPO<n>_HOST_CA_PATH":   localPath,
	"REPO<n>_HOST_CERT_FILE": localPath,
	"REPO<n>_HOST_KEY_FILE":  localPath,
	"PG<n>_HOST_CA_FILE":     localPath,
	"PG<n>_HOST_CA_PATH":     localPath,
	"PG<n>_HOST_CERT_FILE":   localPath,
	"PG<n>_HOST_KEY_FILE":    localPath,
	"TLS_SERVER_CA_FILE":     localPath,
	"TLS_SERVER_CERT_FILE":   localPath,
	"TLS_SERVER_KEY_FILE":    localPath,

	// The other host's configuration and program.
	"REPO<n>_HOST_CONFIG":              otherPath,
	"REPO<n>_HOST_CONFIG_PATH":         otherPath,
	"REPO<n>_HOST_CONFIG_INCLUDE_PATH": otherPath,
	"REPO<n>_HOST_CMD":                 otherPath,
	"PG<n>_HOST_CONFIG":                otherPath,
	"PG<n>_HOST_CONFIG_PATH":           otherPath,
	"PG<n>_HOST_CONFIG_INCLUDE_PATH":   otherPath,
	"PG<n>_HOST_CMD":                   otherPath,
	// Programs.
	"CMD":     otherPath,
	"CMD_SSH": otherPath,
}

// indexedOption splits PG1_PATH into PG<n>_PATH and the prefix of its
// index's options, PG1_.
var indexedOption = regexp.MustCompile(`^(PG|REPO)([0-9]+)_(.+)$`)

// PgBackRestEnv returns the PGBACKREST_* variables of the container's
// environment env as Patroni, PostgreSQL and archive_command must see them
// on m, "NAME=value" sorted by name. In a container they are as written.
// Outside one (m.Mounts), those naming a path of the container's filesystem
// (pgBackRestPaths) map through m.Mounts, Spilo's socket directory to
// m.SocketDir, every other one as it is (credentials, bucket, endpoint,
// stanza...); a local path on no mounted volume is an error, as a path of
// Spilo's configuration is: it would land in the machine's own
// directories, shared by every pod. An option that names a path but is not
// in pgBackRestPaths is an error anywhere: it would pass unseen.
func PgBackRestEnv(env map[string]string, m Machine) ([]string, error) {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(env)) {
		option, ok := strings.CutPrefix(name, pgBackRestEnvPrefix)
		if !ok {
			continue
		}
		value := env[name]
		if value != "" {
			translated, err := pgBackRestValue(option, value, env, m)
			if err != nil {
				return nil, fmt.Errorf("%s=%s: %w", name, value, err)
			}
			value = translated
		}
		out = append(out, name+"="+value)
	}
	return out, nil
}

// pgBackRestValue translates the value of option (a PGBACKREST_ variable
// without its prefix) when it is a local path.
func pgBackRestValue(option, value string, env map[string]string, m Machine) (string, error) {
	key, index := option, ""
	if sm := indexedOption.FindStringSubmatch(option); sm != nil {
		key, index = sm[1]+"<n>_"+sm[3], pgBackRestEnvPrefix+sm[1]+sm[2]+"_"
	}
	kind, known := pgBackRestPaths[key]
	if !known {
		if strings.HasSuffix(key, "_PATH") || strings.HasSuffix(key, "_FILE") || strings.HasSuffix(key, "CONFIG") {
			return "", fmt.Errorf("pgBackRest option %s is not one pgloop knows to be a path or not (pgBackRestPaths in pkg/instance/pgbackrest.go)", pgBackRestOptionName(option))
		}
		return value, nil
	}
	switch kind {
	case pgLocalPath:
		if env[index+"HOST"] != "" {
			return value, nil
		}
	case repoLocalPath:
		if t := env[index+"TYPE"]; (t != "" && t != "posix" && t != "cifs") || env[index+"HOST"] != "" {
			return value, nil
		}
	case gcsKeyPath:
		if t := env[index+"GCS_KEY_TYPE"]; t != "" && t != "service" {
			return value, nil
		}
	case otherPath, notPath:
		return value, nil
	}
	if kind == pgLocalPath && strings.HasSuffix(key, "SOCKET_PATH") {
		if p := path.Clean(value); p == DefaultSocketDir || p == "/var"+DefaultSocketDir {
			return m.SocketDir, nil
		}
	}
	hp, err := m.local(value)
	if err != nil {
		return "", fmt.Errorf("pgBackRest option %s: %w", pgBackRestOptionName(option), err)
	}
	return hp, nil
}

// pgBackRestOptionName is option's name on pgBackRest's command line:
// REPO1_S3_CA_FILE is repo1-s3-ca-file.
func pgBackRestOptionName(option string) string {
	return strings.ToLower(strings.ReplaceAll(option, "_", "-"))
}
