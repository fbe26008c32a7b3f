// Package patroni is pgloop's client for Patroni's REST API (port 8008)
// and the parser of the member data Patroni publishes in each pod's
// StatusAnnotation. It speaks Patroni 3.0.2, whose Spilo image pgloop
// runs.
//
// The Client is for the executor's workers, never the event loop: every
// call blocks until Patroni answers, ctx ends or the Client's Timeout
// passes, whichever comes first, and its failure says which member did not
// answer or what it answered (an *Error). ConfigPatch is pure: it computes
// the PATCH that brings Patroni's dynamic configuration to what pgloop
// wants, so deciding what to change needs no network.
package patroni
