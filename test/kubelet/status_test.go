package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestBuildStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 18, 19, 0, time.UTC)
	now := t0.Add(90*time.Second + 123*time.Millisecond) // sub-second parts are dropped
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(-time.Second)}
	pod := func(containers ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "spilo:" + c})
		}
		return p
	}
	// A pod as the scheduler leaves it.
	scheduledOnly := corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, Conditions: []corev1.PodCondition{scheduled}}
	// A pod Running and not ready since t0.
	runningSince := func(ready corev1.ConditionStatus, since time.Duration) corev1.PodStatus {
		return corev1.PodStatus{
			Phase: corev1.PodRunning, StartTime: ptrTime(at(0)),
			Conditions: []corev1.PodCondition{
				scheduled,
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at(0)},
				{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: at(since)},
				{Type: corev1.PodReady, Status: ready, LastTransitionTime: at(since)},
			},
		}
	}
	crash := &termination{ExitCode: 137, Signal: 9, Reason: "Error", StartedAt: t0, FinishedAt: t0.Add(time.Minute), ContainerID: "process://41"}
	earlier := &termination{ExitCode: 1, Reason: "Error", StartedAt: t0.Add(-time.Hour), FinishedAt: t0.Add(-time.Minute), ContainerID: "process://40"}
	base := instanceState{HostIP: "127.0.0.1", PodIP: "127.1.7.2", ImageID: "process:///usr/bin/patroni"}
	with := func(f func(*instanceState)) instanceState {
		s := base
		f(&s)
		return s
	}

	type want struct {
		phase        corev1.PodPhase
		podIP        string
		ready        corev1.ConditionStatus
		readySince   metav1.Time
		startTime    metav1.Time
		state        string // running, waiting:<reason>, terminated:<exit code>
		containerID  string
		lastExitCode int32 // -1 for no last state
		restarts     int32
		started      bool
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		base  corev1.PodStatus
		state instanceState
		want  want
	}{
		{
			name: "waiting for its volume", pod: pod("postgres"), base: scheduledOnly,
			state: with(func(s *instanceState) { s.PodIP, s.Reason = "", ReasonContainerCreating }),
			want:  want{phase: corev1.PodPending, ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: apiTime(now), state: "waiting:ContainerCreating", lastExitCode: -1},
		},
		{
			name: "just started", pod: pod("postgres"), base: scheduledOnly,
			state: with(func(s *instanceState) { s.EverStarted, s.Phase, s.PID, s.StartedAt = true, containerRunning, 42, t0 }),
			want:  want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: apiTime(now), state: "running", containerID: "process://42", lastExitCode: -1, started: true},
		},
		{
			name: "becomes ready", pod: pod("postgres"), base: runningSince(corev1.ConditionFalse, 0),
			state: with(func(s *instanceState) {
				s.EverStarted, s.Phase, s.PID, s.StartedAt, s.Ready = true, containerRunning, 42, t0, true
			}),
			want: want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionTrue, readySince: apiTime(now), startTime: at(0), state: "running", containerID: "process://42", lastExitCode: -1, started: true},
		},
		{
			name: "stays ready: the transition time is kept", pod: pod("postgres"), base: runningSince(corev1.ConditionTrue, 2*time.Second),
			state: with(func(s *instanceState) {
				s.EverStarted, s.Phase, s.PID, s.StartedAt, s.Ready = true, containerRunning, 42, t0, true
			}),
			want: want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionTrue, readySince: at(2 * time.Second), startTime: at(0), state: "running", containerID: "process://42", lastExitCode: -1, started: true},
		},
		{
			name: "crash loop", pod: pod("postgres"), base: runningSince(corev1.ConditionTrue, 0),
			state: with(func(s *instanceState) {
				s.EverStarted, s.Reason, s.Message, s.Last, s.RestartCount = true, ReasonCrashLoop, "back-off 2s", crash, 1
			}),
			want: want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: at(0), state: "waiting:CrashLoopBackOff", containerID: "process://41", lastExitCode: 137, restarts: 1},
		},
		{
			name: "restarted after the crash", pod: pod("postgres"), base: runningSince(corev1.ConditionFalse, 0),
			state: with(func(s *instanceState) {
				s.EverStarted, s.Phase, s.PID, s.StartedAt, s.Last, s.RestartCount = true, containerRunning, 43, now, crash, 1
			}),
			want: want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: at(0), startTime: at(0), state: "running", containerID: "process://43", lastExitCode: 137, restarts: 1, started: true},
		},
		{
			name: "held", pod: pod("postgres"), base: runningSince(corev1.ConditionTrue, 0),
			state: with(func(s *instanceState) { s.EverStarted, s.Reason, s.Last = true, ReasonHeld, crash }),
			want:  want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: at(0), state: "waiting:Held", containerID: "process://41", lastExitCode: 137},
		},
		{
			name: "terminated on deletion", pod: pod("postgres"), base: runningSince(corev1.ConditionTrue, 0),
			state: with(func(s *instanceState) {
				s.EverStarted, s.Phase, s.Last, s.Previous = true, containerTerminated, crash, earlier
			}),
			want: want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: at(0), state: "terminated:137", containerID: "process://41", lastExitCode: 1},
		},
		{
			name: "a restarted kubelet keeps the phase", pod: pod("postgres"), base: runningSince(corev1.ConditionTrue, 0),
			state: with(func(s *instanceState) { s.Reason = ReasonContainerCreating }),
			want:  want{phase: corev1.PodRunning, podIP: "127.1.7.2", ready: corev1.ConditionFalse, readySince: apiTime(now), startTime: at(0), state: "waiting:ContainerCreating", lastExitCode: -1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildStatus(tc.pod, tc.base, "postgres", tc.state, now)
			w := tc.want
			if got.Phase != w.phase || got.PodIP != w.podIP || got.HostIP != "127.0.0.1" {
				t.Errorf("phase, podIP, hostIP = %s, %q, %q; want %s, %q, 127.0.0.1", got.Phase, got.PodIP, got.HostIP, w.phase, w.podIP)
			}
			if w.podIP != "" && (len(got.PodIPs) != 1 || got.PodIPs[0].IP != w.podIP) {
				t.Errorf("podIPs = %v", got.PodIPs)
			}
			if got.StartTime == nil || !got.StartTime.Equal(&w.startTime) {
				t.Errorf("startTime = %v, want %v", got.StartTime, w.startTime)
			}
			conds := map[corev1.PodConditionType]corev1.PodCondition{}
			for _, c := range got.Conditions {
				conds[c.Type] = c
			}
			if c := conds[corev1.PodScheduled]; c != scheduled {
				t.Errorf("PodScheduled = %+v, want the scheduler's %+v", c, scheduled)
			}
			if c := conds[corev1.PodInitialized]; c.Status != corev1.ConditionTrue {
				t.Errorf("Initialized = %+v", c)
			}
			for _, typ := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
				if c := conds[typ]; c.Status != w.ready || !c.LastTransitionTime.Equal(&w.readySince) {
					t.Errorf("%s = %s since %v, want %s since %v", typ, c.Status, c.LastTransitionTime, w.ready, w.readySince)
				}
			}
			if len(got.ContainerStatuses) != 1 {
				t.Fatalf("containerStatuses = %+v", got.ContainerStatuses)
			}
			cs := got.ContainerStatuses[0]
			if s := stateOf(cs.State); s != w.state {
				t.Errorf("state = %s, want %s", s, w.state)
			}
			if cs.Name != "postgres" || cs.Image != "spilo:postgres" || cs.ImageID != base.ImageID {
				t.Errorf("name, image, imageID = %q, %q, %q", cs.Name, cs.Image, cs.ImageID)
			}
			if cs.ContainerID != w.containerID || cs.RestartCount != w.restarts || *cs.Started != w.started || cs.Ready != (w.ready == corev1.ConditionTrue) {
				t.Errorf("containerID, restarts, started, ready = %q, %d, %v, %v; want %q, %d, %v, %v",
					cs.ContainerID, cs.RestartCount, *cs.Started, cs.Ready, w.containerID, w.restarts, w.started, w.ready == corev1.ConditionTrue)
			}
			last := int32(-1)
			if cs.LastTerminationState.Terminated != nil {
				last = cs.LastTerminationState.Terminated.ExitCode
			}
			if last != w.lastExitCode {
				t.Errorf("last state exit code = %d, want %d", last, w.lastExitCode)
			}
		})
	}
}

func stateOf(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%d", s.Terminated.ExitCode)
	default:
		return "none"
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// TestBuildStatusOtherContainers: a sidecar the kubelet does not run keeps
// the pod unready, rather than pretending.
func TestBuildStatusOtherContainers(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "exporter"}, {Name: "postgres"}}}}
	s := instanceState{EverStarted: true, Phase: containerRunning, Ready: true, PID: 7, StartedAt: time.Now(), PodIP: "127.1.7.2"}
	got := buildStatus(pod, corev1.PodStatus{}, "postgres", s, time.Now())
	if len(got.ContainerStatuses) != 2 || got.ContainerStatuses[0].State.Waiting == nil ||
		got.ContainerStatuses[0].State.Waiting.Reason != reasonNotRun || !got.ContainerStatuses[1].Ready {
		t.Fatalf("containerStatuses = %+v", got.ContainerStatuses)
	}
	for _, c := range got.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
			t.Errorf("Ready = %s with a container not run", c.Status)
		}
	}
}

// TestStatusRoundTrip: a status read back from the API (JSON, seconds,
// fields of others added) equals the one built again from the same state,
// so an idle instance never writes.
func TestStatusRoundTrip(t *testing.T) {
	start := time.Date(2026, 11, 30, 3, 18, 19, 987654321, time.UTC)
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "spilo"}}}}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	crash := &termination{ExitCode: 137, Signal: 9, Reason: "Error", StartedAt: start, FinishedAt: start.Add(time.Second), ContainerID: "process://9"}
	for _, s := range []instanceState{
		{HostIP: "127.0.0.1", Reason: ReasonContainerCreating},
		{HostIP: "127.0.0.1", PodIP: "127.1.7.2", EverStarted: true, Phase: containerRunning, PID: 10, StartedAt: start, Ready: true, RestartCount: 1, Last: crash},
		{HostIP: "127.0.0.1", PodIP: "127.1.7.2", EverStarted: true, Reason: ReasonCrashLoop, Message: "back-off 1s", Last: crash},
		{HostIP: "127.0.0.1", PodIP: "127.1.7.2", EverStarted: true, Phase: containerTerminated, Last: crash},
	} {
		written := buildStatus(pod, pod.Status, "postgres", s, start)
		data, err := json.Marshal(written)
		if err != nil {
			t.Fatal(err)
		}
		var stored corev1.PodStatus
		if err := json.Unmarshal(data, &stored); err != nil {
			t.Fatal(err)
		}
		stored.QOSClass = corev1.PodQOSBurstable // the apiserver's
		later := buildStatus(pod, stored, "postgres", s, start.Add(time.Hour))
		if !sameStatus(later, stored) {
			t.Errorf("state %s: rebuilt status differs from the stored one:\nbuilt  %+v\nstored %+v", describe(s), later, stored)
		}
	}
}

// TestWriteStatusAfterAFailedWrite: a status write that failed may have
// landed, so the next write is made even when the cache and the last
// successful write both show the status wanted (the not-ready status at
// the kubelet's stop, after a Ready write whose answer was cancelled).
func TestWriteStatusAfterAFailedWrite(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "spilo"}}},
	}
	kube := fake.NewClientset(pod)
	fail := true
	patches := 0
	kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if fail {
			return true, nil, errors.New("context canceled")
		}
		return false, nil, nil
	})
	log := logrus.New()
	log.SetOutput(io.Discard)
	in := &instance{k: &kubelet{kube: kube}, log: log}
	defer in.setTimer(0)
	notReady := instanceState{EverStarted: true, Phase: containerRunning, PID: 1, StartedAt: time.Now()}
	in.state = notReady
	fail = false
	in.writeStatus(context.Background(), pod) // not ready: written
	written := *in.written
	pod.Status = written // the cache catches up
	in.state.Ready = true
	fail = true
	in.writeStatus(context.Background(), pod) // Ready: fails, may have landed
	in.state = notReady
	fail = false
	before := patches
	in.writeStatus(context.Background(), pod) // not ready again: cache and last write agree, still written
	if patches != before+1 {
		t.Errorf("%d patches after a failed write, want one more", patches-before)
	}
	if in.writeUnsure {
		t.Errorf("still unsure after a successful write")
	}
}
