package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types set on every Postgresql. They follow the Kubernetes
// conventions so `kubectl wait --for=condition=Ready` works.
const (
	// ConditionReady is True while every desired instance is Ready and a
	// primary is known.
	ConditionReady = "Ready"
	// ConditionProgressing is True while pgloop is creating or updating the
	// cluster's objects and waiting for them to converge.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the cluster cannot reach the desired
	// shape; its message carries the concrete cause (unschedulable pod,
	// quota, pending volume, crash loop, failed API call).
	ConditionDegraded = "Degraded"
)

// MaxHistory bounds Status.History so the object stays small however long a
// cluster lives.
const MaxHistory = 10

// PostgresqlStatus is the persisted state machine of one cluster. Everything
// the operator needs to resume a cluster after a restart is here: the state,
// the epoch that tags its timers, and the timers' absolute deadlines. No
// secret is ever stored in status.
type PostgresqlStatus struct {
	// State is the cluster's state machine state (Pending, Creating, Running,
	// Updating, Degraded, Invalid, Deleting).
	// +optional
	State string `json:"state,omitempty"`
	// StateSince is when the cluster entered State.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`
	// Epoch is bumped on every state change. Timers are tagged with the
	// epoch they were set in; a timer from an older epoch is stale.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// ObservedGeneration is the spec generation the current state acts on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Reason is a one-line, machine-readable cause of the current state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the human-readable cause of the current state.
	// +optional
	Message string `json:"message,omitempty"`
	// Attempt counts consecutive failed or unproductive retries in the
	// current state; it sets the retry backoff.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Timers are the pending timers with their absolute deadlines.
	// +optional
	// +listType=map
	// +listMapKey=name
	Timers []Timer `json:"timers,omitempty"`
	// Conditions are Ready, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// History holds the last transitions, newest last, at most MaxHistory.
	// +optional
	History []Transition `json:"history,omitempty"`
	// DesiredInstances is spec.numberOfInstances as last observed.
	// +optional
	DesiredInstances int32 `json:"desiredInstances,omitempty"`
	// ReadyInstances counts the cluster's pods that are Ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// Ready is "ready/desired", shown by kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`
	// Primary is the name of the pod Patroni elected leader, if known: the
	// pod named by Patroni's leader record while that pod is Ready.
	// +optional
	Primary string `json:"primary,omitempty"`
	// LastPrimary is the pod that was the primary before it became unknown,
	// set only while Primary is empty. A failover first clears Primary (the
	// old leader stops being Ready) and only later names the new one; this
	// field lets the change be recorded as "old -> new" then, even across a
	// restart of the operator.
	// +optional
	LastPrimary string `json:"lastPrimary,omitempty"`
}

// Timer is a pending timer: when Deadline passes, the operator delivers the
// event Name to the cluster's state machine, provided the cluster is still in
// Epoch.
type Timer struct {
	// Name is the timer, and the event it fires (timeout, retry, resync).
	Name string `json:"name"`
	// Deadline is when the timer fires.
	Deadline metav1.Time `json:"deadline"`
	// Epoch is the status epoch the timer was set in.
	Epoch int64 `json:"epoch"`
}

// Transition is one entry of the state machine's history: a change of
// state, or a change of the primary (event primaryChanged, From and To both
// the state the cluster was in).
type Transition struct {
	// From is the state left.
	From string `json:"from"`
	// To is the state entered.
	To string `json:"to"`
	// Event is the event that caused the transition.
	Event string `json:"event"`
	// Time is when the transition happened.
	Time metav1.Time `json:"time"`
	// Reason is the cause, as in Status.Reason.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what the reason alone does not. Only entries that are
	// no change of state carry one (primaryChanged: "primary changed from
	// A to B"); a state's message is in status, its condition and its
	// Event, and the history stays small.
	// +optional
	Message string `json:"message,omitempty"`
}
