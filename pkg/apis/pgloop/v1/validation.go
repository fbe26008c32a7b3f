package v1

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SupportedVersions are the PostgreSQL major versions pgloop runs, oldest
// first. The CRD's enum on spec.postgresql.version lists the same values (a
// test checks it).
var SupportedVersions = []string{"13", "14", "15", "16", "17", "18"}

// MinVolumeSize is the smallest volume pgloop accepts: below it, initdb, a
// few WAL segments and a base backup for a new replica do not fit.
var MinVolumeSize = resource.MustParse("1Gi")

// PodAnnotationsReserve is the part of the apiserver's limit on the total
// size of a pod's annotations (256 KiB) that spec.podAnnotations may not
// take: pgloop adds its pod template hash to the template, and Patroni its
// member status to every pod. Without it, annotations that fit the limit
// alone make a StatefulSet the apiserver refuses.
const PodAnnotationsReserve = 4 << 10

// Patroni's defaults, which apply to fields left unset.
const (
	DefaultPatroniTTL                  = 30
	DefaultPatroniLoopWait             = 10
	DefaultPatroniRetryTimeout         = 10
	DefaultPatroniMaximumLagOnFailover = 33554432
)

var (
	// userNameRE is zalando's rule for role names: they become part of the
	// Secret name "<user>.<cluster>.credentials...", a DNS subdomain.
	userNameRE = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$`)
	// databaseNameRE admits names that need no quoting in SQL.
	databaseNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	// parameterNameRE admits PostgreSQL setting names, including the
	// dotted names of extensions (pg_stat_statements.max).
	parameterNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*(\.[a-zA-Z_][a-zA-Z0-9_]*)?$`)
)

// reservedUsers are the roles Spilo creates and manages itself.
var reservedUsers = []string{"postgres", "standby"}

// postgresReservedRoles are names PostgreSQL refuses for a role.
var postgresReservedRoles = []string{"public", "none", "current_user", "current_role", "session_user"}

// reservedDatabases exist in every cluster and are not pgloop's to create.
var reservedDatabases = []string{"postgres", "template0", "template1"}

// ownedParameters are settings Patroni or pgloop set on every member; a value
// in the manifest would be overridden or would break replication, so it is
// refused rather than ignored.
var ownedParameters = map[string]string{
	"listen_addresses":          "Patroni",
	"port":                      "Patroni",
	"data_directory":            "Patroni",
	"config_file":               "Patroni",
	"hba_file":                  "Patroni",
	"ident_file":                "Patroni",
	"cluster_name":              "Patroni",
	"hot_standby":               "Patroni",
	"synchronous_standby_names": "Patroni (use patroni.synchronous_mode)",
	"primary_conninfo":          "Patroni",
	"primary_slot_name":         "Patroni",
	"promote_trigger_file":      "Patroni",
	"unix_socket_directories":   "Spilo",
}

// clusterWideIntParameters are the settings Patroni keeps equal on every
// member through its DCS: a replica refuses to start with a smaller value
// than its primary. Patroni compares them as integers, so they must be
// plain integers, at least the given minimum.
var clusterWideIntParameters = map[string]int64{
	"max_connections":           1,
	"max_locks_per_transaction": 10,
	"max_worker_processes":      0,
	"max_prepared_transactions": 0,
	"max_wal_senders":           0,
	"max_replication_slots":     0,
}

// booleanParameters are cluster-wide settings whose value must be a
// PostgreSQL boolean.
var booleanParameters = []string{"track_commit_timestamp", "wal_log_hints"}

// postgresBooleans are the spellings PostgreSQL accepts for a boolean.
var postgresBooleans = []string{"on", "off", "true", "false", "yes", "no", "1", "0"}

// Validate reports what the CRD schema admits but pgloop cannot serve, and
// re-checks the schema's own rules so that an object that never went through
// the apiserver (a test fixture, an object stored before the CRD was
// upgraded) is judged the same way. An empty list means the cluster is valid.
func (p *Postgresql) Validate() field.ErrorList {
	errs := ValidateClusterName(p.Name, field.NewPath("metadata", "name"))
	errs = append(errs, p.Spec.Validate()...)
	errs = append(errs, p.validateAdopt()...)
	errs = append(errs, p.validatePatroniStore()...)
	// The clone's checks need the cluster's own name, namespace and
	// creation time.
	return append(errs, validateClone(&p.Spec, p.Namespace, p.Name, p.CreationTimestamp.Time, field.NewPath("spec"))...)
}

// ValidateClusterName checks that name can be the base of every object name
// pgloop derives from it: Services need a DNS-1035 label, and the
// StatefulSet's revision label needs MaxClusterNameLength or fewer
// characters.
func ValidateClusterName(name string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1035Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	if len(name) > MaxClusterNameLength {
		errs = append(errs, field.TooLong(path, name, MaxClusterNameLength))
	}
	return errs
}

// Validate checks the spec; see Postgresql.Validate. Paths start at "spec".
func (s *PostgresqlSpec) Validate() field.ErrorList {
	path := field.NewPath("spec")
	var errs field.ErrorList

	if s.TeamID == "" {
		errs = append(errs, field.Required(path.Child("teamId"), "the team that owns the cluster"))
	} else {
		for _, msg := range validation.IsValidLabelValue(s.TeamID) {
			errs = append(errs, field.Invalid(path.Child("teamId"), s.TeamID, msg))
		}
	}

	if s.NumberOfInstances < 0 || s.NumberOfInstances > MaxInstances {
		errs = append(errs, field.Invalid(path.Child("numberOfInstances"), s.NumberOfInstances,
			fmt.Sprintf("must be between 0 and %d", MaxInstances)))
	}

	errs = append(errs, s.PostgreSQL.validate(path.Child("postgresql"), s.NumberOfInstances)...)
	errs = append(errs, s.Volume.validate(path.Child("volume"))...)
	if s.Resources != nil {
		errs = append(errs, s.Resources.validate(path.Child("resources"))...)
	}
	errs = append(errs, validateUsers(s.Users, path.Child("users"))...)
	errs = append(errs, validateDatabases(s.Databases, s.Users, path.Child("databases"))...)
	if s.Patroni != nil {
		errs = append(errs, s.Patroni.validate(path.Child("patroni"))...)
	}
	if s.DockerImage != strings.TrimSpace(s.DockerImage) {
		// The apiserver takes such an image in the StatefulSet's template
		// but refuses every pod made from it.
		errs = append(errs, field.Invalid(path.Child("dockerImage"), s.DockerImage, "must not have leading or trailing whitespace"))
	}
	errs = append(errs, validateTolerations(s.Tolerations, path.Child("tolerations"))...)
	if s.NodeAffinity != nil {
		errs = append(errs, validateNodeAffinity(s.NodeAffinity, path.Child("nodeAffinity"))...)
	}
	errs = append(errs, apivalidation.ValidateAnnotations(s.PodAnnotations, path.Child("podAnnotations"))...)
	if size, limit := annotationsSize(s.PodAnnotations), int64(apivalidation.TotalAnnotationSizeLimitB-PodAnnotationsReserve); size > limit {
		errs = append(errs, field.TooLong(path.Child("podAnnotations"), "", int(limit)))
	}
	errs = append(errs, apivalidation.ValidateAnnotations(s.ServiceAnnotations, path.Child("serviceAnnotations"))...)
	errs = append(errs, validateWindows(s.MaintenanceWindows, path.Child("maintenanceWindows"))...)
	errs = append(errs, s.validateLogicalBackup(path)...)
	errs = append(errs, s.validateServices(path)...)
	errs = append(errs, s.validateBackup(path)...)
	errs = append(errs, s.validateStandby(path)...)
	errs = append(errs, s.validatePrepared(path)...)
	errs = append(errs, s.validateTLS(path)...)
	errs = append(errs, s.validateRotation(path)...)
	errs = append(errs, s.validatePodExtras(path)...)
	errs = append(errs, s.validatePodTemplate(path)...)
	return append(errs, s.validatePooler(path)...)
}

// reservedContainerName is the name of pgloop's own container in each pod.
const reservedContainerName = "postgres"

// validatePodExtras checks the fields taken from zalando's manifest that
// add to the Services and pods: the load balancers' source ranges, the
// init containers and the sidecars. The apiserver would refuse a Service
// or a StatefulSet made from what it catches, after the cluster was
// admitted.
func (s *PostgresqlSpec) validatePodExtras(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	// The CRD's maxItems, re-checked.
	for _, l := range []struct {
		name    string
		n, most int
	}{
		{"allowedSourceRanges", len(s.AllowedSourceRanges), 64},
		{"initContainers", len(s.InitContainers), 16},
		{"sidecars", len(s.Sidecars), 6},
	} {
		if l.n > l.most {
			errs = append(errs, field.TooMany(path.Child(l.name), l.n, l.most))
		}
	}
	for i, r := range s.AllowedSourceRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			errs = append(errs, field.Invalid(path.Child("allowedSourceRanges").Index(i), r, "must be a CIDR, e.g. 10.0.0.0/8 or fd01::/48"))
		}
	}
	// Init containers and containers share one namespace of names in a
	// pod, and "postgres" is pgloop's.
	seen := map[string]bool{reservedContainerName: true}
	checkName := func(name string, p *field.Path) {
		switch {
		case name == "":
			errs = append(errs, field.Required(p, "a container name"))
		case name == reservedContainerName:
			errs = append(errs, field.Invalid(p, name, "is pgloop's PostgreSQL container"))
		case seen[name]:
			errs = append(errs, field.Duplicate(p, name))
		default:
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
		}
		seen[name] = true
	}
	checkImage := func(image string, p *field.Path) {
		if image == "" {
			errs = append(errs, field.Required(p, "an image"))
		} else if image != strings.TrimSpace(image) {
			errs = append(errs, field.Invalid(p, image, "must not have leading or trailing whitespace"))
		}
	}
	for i, c := range s.InitContainers {
		ip := path.Child("initContainers").Index(i)
		checkName(c.Name, ip.Child("name"))
		checkImage(c.Image, ip.Child("image"))
	}
	for i, c := range s.Sidecars {
		ip := path.Child("sidecars").Index(i)
		checkName(c.Name, ip.Child("name"))
		checkImage(c.Image, ip.Child("image"))
		if c.Resources != nil {
			errs = append(errs, c.Resources.validate(ip.Child("resources"))...)
		}
		for j, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ip.Child("env").Index(j).Child("name"), e.Name, msg))
			}
		}
		for j, port := range c.Ports {
			if port.ContainerPort < 1 || port.ContainerPort > 65535 {
				errs = append(errs, field.Invalid(ip.Child("ports").Index(j).Child("containerPort"), port.ContainerPort, "must be between 1 and 65535"))
			}
		}
	}
	return errs
}

func (p *PostgresqlParam) validate(path *field.Path, instances int32) field.ErrorList {
	var errs field.ErrorList
	if p.Version == "" {
		errs = append(errs, field.Required(path.Child("version"),
			"the PostgreSQL major version, one of "+strings.Join(SupportedVersions, ", ")))
	} else if !slices.Contains(SupportedVersions, p.Version) {
		errs = append(errs, field.NotSupported(path.Child("version"), p.Version, SupportedVersions))
	}

	replicas := int64(instances) - 1
	for _, name := range slices.Sorted(maps.Keys(p.Parameters)) {
		value := p.Parameters[name]
		fp := path.Child("parameters").Key(name)
		lower := strings.ToLower(name)
		if !parameterNameRE.MatchString(name) {
			errs = append(errs, field.Invalid(fp, name, "is not a PostgreSQL setting name"))
			continue
		}
		if owner, ok := ownedParameters[lower]; ok {
			errs = append(errs, field.Forbidden(fp, "is set by "+owner+" and cannot be overridden"))
			continue
		}
		if minimum, ok := clusterWideIntParameters[lower]; ok {
			n, err := strconv.ParseInt(value, 10, 64)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(fp, value,
					"must be a plain integer: Patroni sets it on every member through its DCS"))
			case n < minimum:
				errs = append(errs, field.Invalid(fp, value, fmt.Sprintf("must be at least %d", minimum)))
			case (lower == "max_wal_senders" || lower == "max_replication_slots") && n < replicas:
				// Each replica streams through its own WAL sender and
				// holds its own slot on the primary.
				errs = append(errs, field.Invalid(fp, value, fmt.Sprintf(
					"must be at least the number of replicas (%d, numberOfInstances - 1): each replica needs one", replicas)))
			}
			continue
		}
		if lower == "wal_level" && value != "replica" && value != "logical" {
			errs = append(errs, field.NotSupported(fp, value, []string{"replica", "logical"}))
			continue
		}
		if slices.Contains(booleanParameters, lower) && !slices.Contains(postgresBooleans, strings.ToLower(value)) {
			errs = append(errs, field.Invalid(fp, value, "must be a boolean (on, off, true, false, yes, no, 1, 0)"))
		}
	}
	return errs
}

func (v *Volume) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v.Size.Cmp(MinVolumeSize) < 0 {
		errs = append(errs, field.Invalid(path.Child("size"), v.Size.String(),
			"must be at least "+MinVolumeSize.String()+": smaller volumes cannot hold a data directory and its WAL"))
	}
	if v.StorageClass != "" {
		for _, msg := range validation.IsDNS1123Subdomain(v.StorageClass) {
			errs = append(errs, field.Invalid(path.Child("storageClass"), v.StorageClass, msg))
		}
	}
	return errs
}

func (r *Resources) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, r.Requests.validate(path.Child("requests"))...)
	errs = append(errs, r.Limits.validate(path.Child("limits"))...)
	errs = append(errs, r.validateHugePages(path)...)
	if r.Requests == nil || r.Limits == nil {
		return errs
	}
	check := func(name string, request, limit *resource.Quantity) {
		if request != nil && limit != nil && request.Cmp(*limit) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests", name), request.String(),
				fmt.Sprintf("must not exceed resources.limits.%s (%s)", name, limit.String())))
		}
	}
	check("cpu", r.Requests.CPU, r.Limits.CPU)
	check("memory", r.Requests.Memory, r.Limits.Memory)
	return errs
}

func (d *ResourceDescription) validate(path *field.Path) field.ErrorList {
	if d == nil {
		return nil
	}
	var errs field.ErrorList
	if d.CPU != nil && d.CPU.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("cpu"), d.CPU.String(), "must be greater than zero"))
	}
	if d.Memory != nil && d.Memory.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("memory"), d.Memory.String(), "must be greater than zero"))
	}
	return errs
}

func validateUsers(users map[string]UserFlags, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(users) > MaxUsers {
		errs = append(errs, field.TooMany(path, len(users), MaxUsers))
	}
	for _, name := range slices.Sorted(maps.Keys(users)) {
		fp := path.Key(name)
		switch {
		case len(name) > MaxIdentifierLength:
			errs = append(errs, field.TooLong(fp, name, MaxIdentifierLength))
		case !userNameRE.MatchString(name):
			errs = append(errs, field.Invalid(fp, name,
				"must be lower case letters, digits, '_', '-' or '.', starting and ending with a letter or digit"))
		case slices.Contains(reservedUsers, name) || strings.HasPrefix(name, "pg_"):
			errs = append(errs, field.Forbidden(fp, "is reserved: postgres and standby are Spilo's own roles, and PostgreSQL reserves the pg_ prefix"))
		case slices.Contains(postgresReservedRoles, name):
			errs = append(errs, field.Forbidden(fp, "is reserved: PostgreSQL refuses it as a role name"))
		}
		errs = append(errs, validateFlags(users[name], fp)...)
	}
	return errs
}

func validateFlags(flags UserFlags, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[UserFlag]bool{}
	for i, f := range flags {
		n := f.Normalize()
		if !n.known() {
			errs = append(errs, field.NotSupported(path.Index(i), string(f), knownFlagNames()))
			continue
		}
		if seen[n] {
			errs = append(errs, field.Duplicate(path.Index(i), string(f)))
			continue
		}
		seen[n] = true
		if neg := n.negation(); seen[neg] {
			errs = append(errs, field.Invalid(path.Index(i), string(f),
				fmt.Sprintf("contradicts %s given for the same user", neg)))
		}
	}
	return errs
}

func validateDatabases(databases map[string]string, users map[string]UserFlags, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(databases) > MaxDatabases {
		errs = append(errs, field.TooMany(path, len(databases), MaxDatabases))
	}
	for _, name := range slices.Sorted(maps.Keys(databases)) {
		fp := path.Key(name)
		switch {
		case len(name) > MaxIdentifierLength:
			errs = append(errs, field.TooLong(fp, name, MaxIdentifierLength))
		case !databaseNameRE.MatchString(name):
			errs = append(errs, field.Invalid(fp, name, "must be letters, digits or '_', not starting with a digit"))
		case slices.Contains(reservedDatabases, name):
			errs = append(errs, field.Forbidden(fp, "exists in every cluster and cannot be declared"))
		}
		owner := databases[name]
		if _, ok := users[owner]; !ok {
			errs = append(errs, field.Invalid(fp, owner,
				fmt.Sprintf("owner %q of database %q must be declared in spec.users", owner, name)))
		}
	}
	return errs
}

func (p *Patroni) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	ttl, loopWait, retryTimeout := p.EffectiveTimings()
	inRange := func(name string, v, lo, hi int32) {
		if v < lo || v > hi {
			errs = append(errs, field.Invalid(path.Child(name), v, fmt.Sprintf("must be between %d and %d seconds", lo, hi)))
		}
	}
	inRange("ttl", ttl, 20, 3600)
	inRange("loop_wait", loopWait, 1, 600)
	inRange("retry_timeout", retryTimeout, 3, 600)
	if loopWait+2*retryTimeout > ttl {
		errs = append(errs, field.Invalid(path.Child("ttl"), ttl, fmt.Sprintf(
			"must be at least loop_wait + 2 * retry_timeout (%d): otherwise a primary whose DCS calls are retrying loses its leader lock and is demoted",
			loopWait+2*retryTimeout)))
	}
	if p.MaximumLagOnFailover < 0 {
		errs = append(errs, field.Invalid(path.Child("maximum_lag_on_failover"), p.MaximumLagOnFailover, "must not be negative"))
	}
	for i, line := range p.PgHba {
		switch {
		case strings.TrimSpace(line) == "":
			errs = append(errs, field.Invalid(path.Child("pg_hba").Index(i), line, "must not be empty"))
		case strings.ContainsAny(line, "\r\n"):
			errs = append(errs, field.Invalid(path.Child("pg_hba").Index(i), line, "must be a single line"))
		}
	}
	errs = append(errs, validateInitDB(p.InitDB, path.Child("initdb"))...)
	if p.SynchronousModeStrict && !p.SynchronousMode {
		errs = append(errs, field.Invalid(path.Child("synchronous_mode_strict"), true, "needs synchronous_mode: true; Patroni ignores it otherwise"))
	}
	if p.SynchronousNodeCount < 0 {
		errs = append(errs, field.Invalid(path.Child("synchronous_node_count"), p.SynchronousNodeCount, "must be at least 1"))
	}
	if p.SynchronousNodeCount > 1 && !p.SynchronousMode {
		errs = append(errs, field.Invalid(path.Child("synchronous_node_count"), p.SynchronousNodeCount, "needs synchronous_mode: true; Patroni ignores it otherwise"))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Slots)) {
		errs = append(errs, validateSlot(name, p.Slots[name], path.Child("slots").Key(name))...)
	}
	return errs
}

// initdbFlags are the initdb options without a value: "true" passes the
// flag, "false" leaves it out (data-checksums is one of Spilo's defaults).
var initdbFlags = map[string]bool{
	"data-checksums":     true,
	"no-data-checksums":  true,
	"debug":              true,
	"no-locale":          true,
	"noclean":            true,
	"no-clean":           true,
	"no-instructions":    true,
	"allow-group-access": true,
	"discard-caches":     true,
}

// initdbValued are the initdb options (PostgreSQL 13 to 18) that take a
// value and that pgloop passes on.
var initdbValued = map[string]bool{
	"auth":               true,
	"auth-host":          true,
	"auth-local":         true,
	"encoding":           true,
	"locale":             true,
	"locale-provider":    true,
	"icu-locale":         true,
	"icu-rules":          true,
	"builtin-locale":     true,
	"lc-collate":         true,
	"lc-ctype":           true,
	"lc-messages":        true,
	"lc-monetary":        true,
	"lc-numeric":         true,
	"lc-time":            true,
	"text-search-config": true,
	"wal-segsize":        true,
	"set":                true,
}

// initdbOwned are the initdb options Patroni or Spilo set, or that would
// move data off the data volume; Patroni refuses some of them itself, at
// bootstrap, where the error would only show in the pod's log.
var initdbOwned = map[string]string{
	"pgdata":    "Patroni passes the data directory",
	"D":         "Patroni passes the data directory",
	"username":  "Patroni passes the superuser (postgres)",
	"U":         "Patroni passes the superuser (postgres)",
	"pwfile":    "Patroni passes the superuser's password",
	"pwprompt":  "Patroni passes the superuser's password",
	"nosync":    "Patroni refuses it",
	"no-sync":   "Patroni refuses it",
	"sync-only": "Patroni refuses it",
	"version":   "Patroni refuses it",
	"waldir":    "the WAL must stay on the data volume",
	"xlogdir":   "the WAL must stay on the data volume",
	"X":         "the WAL must stay on the data volume",
}

// validateInitDB checks the initdb options: long names initdb knows,
// "true" or "false" for a flag, a single-line value for the others.
func validateInitDB(opts map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(opts)) {
		v, p := opts[name], path.Key(name)
		switch {
		case initdbOwned[name] != "":
			errs = append(errs, field.Forbidden(p, "initdb option "+name+" is not allowed: "+initdbOwned[name]))
		case initdbFlags[name]:
			if v != "true" && v != "false" {
				errs = append(errs, field.Invalid(p, v, "initdb flag: must be \"true\" or \"false\""))
			}
		case initdbValued[name]:
			if strings.TrimSpace(v) == "" || strings.ContainsAny(v, "\r\n") {
				errs = append(errs, field.Invalid(p, v, "must be a non-empty single line"))
			}
		default:
			errs = append(errs, field.NotSupported(p, name, slices.Sorted(maps.Keys(initdbKnown()))))
		}
	}
	return errs
}

func initdbKnown() map[string]bool {
	known := maps.Clone(initdbValued)
	maps.Copy(known, initdbFlags)
	return known
}

// slotNameRE is PostgreSQL's rule for replication slot names: lower case
// letters, digits and underscores, at most 63 bytes.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// validateSlot checks a permanent replication slot as Patroni reads it: a
// type, physical or logical, and database and plugin for a logical one.
func validateSlot(name string, opts map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !slotNameRE.MatchString(name) {
		errs = append(errs, field.Invalid(path, name, "a slot name has 1 to 63 lower case letters, digits or underscores"))
	}
	switch t := opts["type"]; t {
	case "physical":
		for _, k := range []string{"database", "plugin"} {
			if _, ok := opts[k]; ok {
				errs = append(errs, field.Forbidden(path.Child(k), "only a logical slot has a "+k))
			}
		}
	case "logical":
		for _, k := range []string{"database", "plugin"} {
			if strings.TrimSpace(opts[k]) == "" {
				errs = append(errs, field.Required(path.Child(k), "a logical slot needs a "+k))
			}
		}
	case "":
		errs = append(errs, field.Required(path.Child("type"), "physical or logical"))
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), t, []string{"physical", "logical"}))
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k != "type" && k != "database" && k != "plugin" {
			errs = append(errs, field.NotSupported(path.Child(k), k, []string{"type", "database", "plugin"}))
		}
	}
	return errs
}

// validateTolerations applies the apiserver's rules for a pod's
// tolerations (ValidateTolerations of Kubernetes' core validation). The CRD
// embeds the type without them, so a toleration the apiserver refuses in a
// pod would otherwise reach the StatefulSet, whose every write it refuses.
func validateTolerations(tolerations []corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		ip := path.Index(i)
		if t.Key != "" {
			errs = append(errs, metav1validation.ValidateLabelName(t.Key, ip.Child("key"))...)
		} else if t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(ip.Child("operator"), t.Operator, "must be Exists when key is empty (which matches every taint)"))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(ip.Child("effect"), t.Effect, "must be NoExecute when tolerationSeconds is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			for _, msg := range validation.IsValidLabelValue(t.Value) {
				errs = append(errs, field.Invalid(ip.Child("value"), t.Value, msg))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(ip.Child("value"), t.Value, "must be empty when operator is Exists"))
			}
		default:
			errs = append(errs, field.NotSupported(ip.Child("operator"), t.Operator,
				[]corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(ip.Child("effect"), t.Effect,
				[]corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
		}
	}
	return errs
}

// validateNodeAffinity applies the apiserver's rules for a pod's node
// affinity (validateNodeAffinity of Kubernetes' core validation), for the
// same reason as validateTolerations.
func validateNodeAffinity(na *corev1.NodeAffinity, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		rp := path.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		if len(r.NodeSelectorTerms) == 0 {
			errs = append(errs, field.Required(rp, "at least one node selector term"))
		}
		for i, term := range r.NodeSelectorTerms {
			errs = append(errs, validateNodeSelectorTerm(term, true, rp.Index(i))...)
		}
	}
	for i, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		pp := path.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		if p.Weight < 1 || p.Weight > 100 {
			errs = append(errs, field.Invalid(pp.Child("weight"), p.Weight, "must be between 1 and 100"))
		}
		errs = append(errs, validateNodeSelectorTerm(p.Preference, false, pp.Child("preference"))...)
	}
	return errs
}

// validateNodeSelectorTerm checks one term; the values of a required
// term's expressions must be label values, as the apiserver asks of a new
// pod.
func validateNodeSelectorTerm(term corev1.NodeSelectorTerm, required bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range term.MatchExpressions {
		rp := path.Child("matchExpressions").Index(i)
		errs = append(errs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "at least one value when operator is In or NotIn"))
			}
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs = append(errs, field.Forbidden(rp.Child("values"), "must be empty when operator is Exists or DoesNotExist"))
			}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "exactly one integer when operator is Gt or Lt"))
			}
			for j, v := range r.Values {
				if _, err := strconv.ParseInt(v, 10, 64); err != nil {
					errs = append(errs, field.Invalid(rp.Child("values").Index(j), v, "must be an integer when operator is Gt or Lt"))
				}
			}
		default:
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, []corev1.NodeSelectorOperator{
				corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
				corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt}))
		}
		if required {
			for j, v := range r.Values {
				for _, msg := range validation.IsValidLabelValue(v) {
					errs = append(errs, field.Invalid(rp.Child("values").Index(j), v, msg))
				}
			}
		}
	}
	for i, r := range term.MatchFields {
		rp := path.Child("matchFields").Index(i)
		if r.Key != "metadata.name" {
			errs = append(errs, field.NotSupported(rp.Child("key"), r.Key, []string{"metadata.name"}))
		}
		switch {
		case r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn:
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator,
				[]corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn}))
		case len(r.Values) != 1:
			errs = append(errs, field.Required(rp.Child("values"), "exactly one node name"))
		}
		for j, v := range r.Values {
			for _, msg := range validation.IsDNS1123Subdomain(v) {
				errs = append(errs, field.Invalid(rp.Child("values").Index(j), v, msg))
			}
		}
	}
	return errs
}

// annotationsSize is the size the apiserver counts against its annotation
// limit: every key and value.
func annotationsSize(annotations map[string]string) int64 {
	var size int64
	for k, v := range annotations {
		size += int64(len(k)) + int64(len(v))
	}
	return size
}

// EffectiveTimings returns ttl, loop_wait and retry_timeout with Patroni's
// defaults in place of unset (zero) fields.
func (p *Patroni) EffectiveTimings() (ttl, loopWait, retryTimeout int32) {
	ttl, loopWait, retryTimeout = DefaultPatroniTTL, DefaultPatroniLoopWait, DefaultPatroniRetryTimeout
	if p == nil {
		return ttl, loopWait, retryTimeout
	}
	if p.TTL != 0 {
		ttl = p.TTL
	}
	if p.LoopWait != 0 {
		loopWait = p.LoopWait
	}
	if p.RetryTimeout != 0 {
		retryTimeout = p.RetryTimeout
	}
	return ttl, loopWait, retryTimeout
}

// Normalize returns the flag in the upper case CREATE ROLE uses.
func (f UserFlag) Normalize() UserFlag {
	return UserFlag(strings.ToUpper(string(f)))
}

// allFlags are the positive role attributes; each has a NO-variant.
var allFlags = []UserFlag{FlagSuperuser, FlagInherit, FlagLogin, FlagCreateRole, FlagCreateDB, FlagReplication, FlagBypassRLS}

// known reports whether the normalized flag is a role attribute pgloop
// manages. Mixed case ("Login") is not in the CRD's enum but is accepted
// here, as PostgreSQL would.
func (f UserFlag) known() bool {
	return slices.Contains(allFlags, f) || slices.Contains(allFlags, f.negation())
}

// negation returns the flag's opposite: LOGIN for NOLOGIN and the reverse.
func (f UserFlag) negation() UserFlag {
	if s, ok := strings.CutPrefix(string(f), "NO"); ok && slices.Contains(allFlags, UserFlag(s)) {
		return UserFlag(s)
	}
	return "NO" + f
}

func knownFlagNames() []string {
	var names []string
	for _, f := range allFlags {
		names = append(names, string(f), string(f.negation()))
	}
	return names
}
