// Package convert converts zalando postgres-operator manifests
// (acid.zalan.do/v1, kind postgresql, alone or in a List) into pgloop's
// (pgloop.dev/v1, kind Postgresql), for `pgloop convert`. A field is kept as
// written when pgloop's API type has it and dropped otherwise; a comment
// block above each manifest gives the reason for each field dropped or
// changed and names the cluster's credentials Secrets, which differ from
// zalando's.
//
// Convert refuses, with an error naming the input and the document, a
// document that is not YAML or not a zalando postgresql (a pgloop manifest
// included), has no spec, or holds a value pgloop's type cannot take (a
// quantity that does not parse, a string for a number). Values that decode
// but pgloop's validation rejects are kept: Render marks them REFUSED and
// reports them in an error wrapping ErrRefused.
//
// Everything here is pure: it reads what it is given and writes nothing.
package convert
