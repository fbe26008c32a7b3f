// Package observed holds Cluster, what pgloop's caches hold of one cluster:
// its resource and the objects its facts are derived from. The informers
// (pkg/informers) fill it from their caches; pkg/facts derives the
// cluster's fsm.Facts from it. It is the one type both sides share, so
// neither imports the other: the caches know nothing of the facts or of the
// state machine, and the derivation nothing of informers.
//
// It holds plain data only and imports nothing of pgloop but pkg/apis.
package observed
