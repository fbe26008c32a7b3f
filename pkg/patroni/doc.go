// Package patroni is pgloop's client for Patroni's REST API (port 8008)
// and the parser of the member data Patroni publishes in each pod's
// StatusAnnotation.
//
// It is verified against Patroni 3.0.2 only: its tests use that version's
// answers and member data, and the testbed's data plane runs Debian's
// Patroni 3.0.2 package (docs/testbed.md). The default Spilo image
// (cluster.DefaultImage) ships its own Patroni, against which nothing here
// is tested; the member data parser also accepts the role "primary" that
// later versions write for "master".
//
// The Client is for the executor's workers, never the event loop: every
// call blocks until Patroni answers, ctx ends or the Client's Timeout
// passes, whichever comes first, and its failure says which member did not
// answer or what it answered (an *Error). ConfigPatch is pure: it computes
// the PATCH that brings Patroni's dynamic configuration to what pgloop
// wants, so deciding what to change needs no network.
package patroni
