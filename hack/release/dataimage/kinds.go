package main

import "time"

// kind is one of the images pgloop's pods run, besides the operator's.
type kind struct {
	Name        string   // the -kind flag
	Title       string   // org.opencontainers.image.title
	Description string   // org.opencontainers.image.description
	Tag         string   // the tag's prefix before the version ("15-"), or ""
	Packages    []string // what mmdebstrap --include's, with their dependencies
	// Main are the packages whose versions the label dev.pgloop.packages
	// names (every package is in /usr/share/pgloop/packages.txt).
	Main       []string
	Entrypoint []string
	Env        []string
}

// The suite the images are built from: PostgreSQL 15, Patroni 3.0 and
// pgBackRest 2.45 are bookworm's, as on the local plane's data plane
// (hack/data-plane-deps.sh).
const suite = "bookworm"

// rootfsEpoch is SOURCE_DATE_EPOCH of the root file systems: bookworm's
// release day. It is what the files the build makes say as their mtime
// (the packages' files keep theirs), and it stays the same from one
// pgloop commit to the next, so the rootfs layer does too.
var rootfsEpoch = time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)

// The ids postgres has in the images, Spilo's: pgloop's pods run as
// 101:103 (customize.sh).
const (
	postgresUID = 101
	postgresGID = 103
	pgHome      = "/home/postgres"
)

// binPath is where the pgloop binary is in both images.
const binPath = "usr/local/bin/pgloop"

// labelPackages is the label naming the main packages' versions.
const labelPackages = "dev.pgloop.packages"

var kinds = map[string]kind{
	"instance": {
		Name:        "instance",
		Title:       "pgloop-postgres",
		Description: "PostgreSQL 15 with Patroni and pgBackRest, started by pgloop instance",
		Tag:         "15-",
		Packages:    []string{"postgresql-15", "patroni", "pgbackrest", "python3-kubernetes", "ca-certificates"},
		Main:        []string{"postgresql-15", "patroni", "pgbackrest"},
		Entrypoint:  []string{"/usr/local/bin/pgloop", "instance"},
		Env: []string{
			"PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LC_ALL=C.UTF-8",
			"LANG=C.UTF-8",
			"PGHOME=" + pgHome,
		},
	},
	"pooler": {
		Name:        "pooler",
		Title:       "pgloop-pgbouncer",
		Description: "PgBouncer, started by pgloop pooler",
		Packages:    []string{"pgbouncer", "ca-certificates"},
		Main:        []string{"pgbouncer"},
		Entrypoint:  []string{"/usr/local/bin/pgloop", "pooler"},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LC_ALL=C.UTF-8",
			"LANG=C.UTF-8",
			"PGHOME=" + pgHome,
		},
	},
}
