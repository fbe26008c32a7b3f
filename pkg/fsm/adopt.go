package fsm

// ReasonAdoptionRefused says the effects failed because the objects of
// the cluster to adopt (annotation pgloop.dev/adopt) cannot be taken over
// (v1.ErrAdoptionRefused); nothing was touched. The state is that of any
// failed effect: Creating, retried with backoff.
const ReasonAdoptionRefused = "AdoptionRefused"
