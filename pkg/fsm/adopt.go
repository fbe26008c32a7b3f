package fsm

// ReasonAdoptionRefused says the effects failed because the objects of
// the cluster to adopt (annotation pgloop.dev/adopt) cannot be taken over
// (v1.ErrAdoptionRefused); nothing was touched. The state is that of any
// failed effect: Creating, retried, but with the backoff of a wait (at
// most 8 × RetryBase, 16 s) rather than a failure's (up to RetryMax): the
// cause goes away by the user's hand on objects pgloop does not watch
// (the zalando postgresql deleted with --cascade=orphan, an owner
// reference removed), and the cluster must follow within seconds.
const ReasonAdoptionRefused = "AdoptionRefused"
