package kubelet

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Waiting reasons of the instance's container, as `kubectl get pods` shows
// them.
const (
	// ReasonContainerCreating: volumes not bound yet, or not started yet.
	ReasonContainerCreating = "ContainerCreating"
	// ReasonConfigError: the environment or Patroni's configuration cannot
	// be built (a missing Secret key, say).
	ReasonConfigError = "CreateContainerConfigError"
	// ReasonStartError: Patroni could not be started.
	ReasonStartError = "CreateContainerError"
	// ReasonCrashLoop: Patroni exited and waits for its back-off.
	ReasonCrashLoop = "CrashLoopBackOff"
	// ReasonHeld: HoldAnnotation keeps the instance down.
	ReasonHeld = "Held"
	// reasonNotRun: a container other than the one this kubelet runs.
	reasonNotRun = "NotRunByProcessKubelet"
)

// containerPhase is where the instance's container is.
type containerPhase int

const (
	containerWaiting containerPhase = iota
	containerRunning
	containerTerminated
)

// termination is how one run of the container ended.
type termination struct {
	ExitCode, Signal      int32
	Reason                string
	StartedAt, FinishedAt time.Time
	ContainerID           string
}

func (t *termination) api() *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    t.ExitCode,
		Signal:      t.Signal,
		Reason:      t.Reason,
		StartedAt:   apiTime(t.StartedAt),
		FinishedAt:  apiTime(t.FinishedAt),
		ContainerID: t.ContainerID,
	}
}

// instanceState is everything the pod status says about an instance. The
// instance's goroutine owns it; buildStatus turns it into a PodStatus.
type instanceState struct {
	PodIP, HostIP string
	// EverStarted: a process has run for this pod, so its phase is Running
	// from then on (restartPolicy Always).
	EverStarted bool
	Phase       containerPhase
	// Reason and Message of a waiting container.
	Reason, Message string
	// PID and StartedAt of the running process.
	PID       int
	StartedAt time.Time
	Ready     bool
	// RestartCount counts the starts after the first.
	RestartCount int32
	// Last is how the latest run ended, Previous the run before it. A
	// terminated container reports Last as its state and Previous as its
	// last state; otherwise Last is the last state.
	Last, Previous *termination
	ImageID        string
	// Resources are the container's requests and limits, reported as a
	// kubelet reports what it configured (status.containerStatuses[].
	// resources); image containers only, and not enforced here.
	Resources *corev1.ResourceRequirements
}

// apiTime is t at the API's resolution (seconds), so a status built twice
// from the same state compares equal to what the apiserver stored.
func apiTime(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}

// buildStatus returns the status the pod should have. base is the status
// it has (the last one written, or the cached one): condition transition
// times and the start time carry over from it. The container named run is
// the one this kubelet runs; any other is reported as never started.
func buildStatus(pod *corev1.Pod, base corev1.PodStatus, run string, s instanceState, now time.Time) corev1.PodStatus {
	st := corev1.PodStatus{
		Phase:   corev1.PodPending,
		HostIP:  s.HostIP,
		HostIPs: []corev1.HostIP{{IP: s.HostIP}},
	}
	if s.EverStarted || base.Phase == corev1.PodRunning {
		st.Phase = corev1.PodRunning
	}
	if s.PodIP != "" {
		st.PodIP = s.PodIP
		st.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	if base.StartTime != nil {
		st.StartTime = base.StartTime.DeepCopy()
	} else {
		st.StartTime = ptr.To(apiTime(now))
	}

	allReady := true
	for _, c := range pod.Spec.Containers {
		var cs corev1.ContainerStatus
		if c.Name == run {
			cs = containerStatus(c, s)
		} else {
			cs = corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: reasonNotRun, Message: "the process kubelet runs only container " + run,
				}},
			}
		}
		allReady = allReady && cs.Ready
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	ready := corev1.ConditionFalse
	if allReady && len(pod.Spec.Containers) > 0 {
		ready = corev1.ConditionTrue
	}
	// The scheduler's condition is kept as it is.
	for _, c := range base.Conditions {
		if c.Type == corev1.PodScheduled {
			st.Conditions = append(st.Conditions, *c.DeepCopy())
		}
	}
	for _, c := range []struct {
		t      corev1.PodConditionType
		status corev1.ConditionStatus
	}{
		{corev1.PodInitialized, corev1.ConditionTrue},
		{corev1.ContainersReady, ready},
		{corev1.PodReady, ready},
	} {
		st.Conditions = append(st.Conditions, condition(base, c.t, c.status, now))
	}
	return st
}

func containerStatus(c corev1.Container, s instanceState) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:         c.Name,
		Image:        c.Image,
		ImageID:      s.ImageID,
		RestartCount: s.RestartCount,
		Started:      ptr.To(s.Phase == containerRunning),
		Resources:    s.Resources,
	}
	switch {
	case s.Phase == containerRunning:
		cs.Ready = s.Ready
		cs.ContainerID = containerID(s.PID)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: apiTime(s.StartedAt)}
	case s.Phase == containerTerminated && s.Last != nil:
		cs.ContainerID = s.Last.ContainerID
		cs.State.Terminated = s.Last.api()
		if s.Previous != nil {
			cs.LastTerminationState.Terminated = s.Previous.api()
		}
		return cs
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: s.Reason, Message: s.Message}
		if s.Last != nil {
			cs.ContainerID = s.Last.ContainerID
		}
	}
	if s.Last != nil {
		cs.LastTerminationState.Terminated = s.Last.api()
	}
	return cs
}

// condition returns condition t with status, keeping the transition time of
// base's when the status has not changed.
func condition(base corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, now time.Time) corev1.PodCondition {
	for _, c := range base.Conditions {
		if c.Type == t && c.Status == status {
			return corev1.PodCondition{Type: t, Status: status, LastTransitionTime: c.LastTransitionTime}
		}
	}
	return corev1.PodCondition{Type: t, Status: status, LastTransitionTime: apiTime(now)}
}

// managed is the part of a status this kubelet writes; the rest (qosClass,
// nominatedNodeName...) belongs to others and is left out of comparisons.
func managed(st corev1.PodStatus) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:             st.Phase,
		HostIP:            st.HostIP,
		HostIPs:           st.HostIPs,
		PodIP:             st.PodIP,
		PodIPs:            st.PodIPs,
		StartTime:         st.StartTime,
		Conditions:        st.Conditions,
		ContainerStatuses: st.ContainerStatuses,
	}
}

// sameStatus reports whether two statuses agree on what this kubelet writes.
func sameStatus(a, b corev1.PodStatus) bool {
	return apiequality.Semantic.DeepEqual(managed(a), managed(b))
}
