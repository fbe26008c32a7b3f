package fsm

import "time"

// TimerConfigCheck asks again for the ensure effects whose configuration
// waits for Patroni to apply it (Machine.configCheck). It fires no event,
// and status does not keep it: a restarted operator asks for the effects
// again anyway (Resume).
const TimerConfigCheck = "configCheck"

// defaultLoopWait is Patroni's loop_wait when Facts.LoopWait is not known.
const defaultLoopWait = 10 * time.Second

// configWait is when the configuration of hash first waited for Patroni
// to apply it (PartConfig, ErrWaiting), in a row: the zero value when it
// does not wait. Not kept in status: a restarted operator waits afresh.
type configWait struct {
	hash  string
	since time.Time
}

// configCheck decides when effects whose configuration waits (part, of the
// in-database work db) ask again, and reports false when the retry timer's
// backoff does. Patroni applies its dynamic configuration in its HA loop:
// at once when its DCS wakes it (the Kubernetes DCS watches the config
// ConfigMap), within loop_wait otherwise, and no watch shows a reload
// (Patroni's member data change for a restart pending only). So the
// machine checks again every quarter of loop_wait, between 250ms and 1s,
// for twice loop_wait from the first wait: an edit Patroni applies is
// acknowledged within a second of it. Past that, what waits is no longer
// Patroni's next loop (a member that does not reload, one whose Patroni
// does not publish its data): the retry backs off as for any other wait.
func (m *Machine) configCheck(part *PartError, db *InDatabase) (time.Duration, bool) {
	if part == nil || part.Part != PartConfig || db == nil || db.Config == "" {
		m.out.configWait = configWait{}
		return 0, false
	}
	now := m.eng.call.now
	if m.out.configWait.hash != db.Config {
		m.out.configWait = configWait{hash: db.Config, since: now}
	}
	loopWait := m.eng.call.facts.LoopWait
	if loopWait <= 0 {
		loopWait = defaultLoopWait
	}
	if now.Sub(m.out.configWait.since) >= 2*loopWait {
		return 0, false
	}
	return configCheckPeriod(loopWait), true
}

// configCheckPeriod is how often a configuration that waits for Patroni
// is checked: a quarter of loop_wait, between 250ms and 1s.
func configCheckPeriod(loopWait time.Duration) time.Duration {
	return min(max(loopWait/4, 250*time.Millisecond), time.Second)
}
