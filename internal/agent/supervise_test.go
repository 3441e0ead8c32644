package agent

import (
	"testing"
	"time"
)

func TestTreeStateString(t *testing.T) {
	for st, want := range map[treeState]string{
		treeRunning:  "running",
		treeStopping: "stopping",
		treeKilling:  "killing",
		treeState(7): "treeState(7)",
	} {
		if got := st.String(); got != want {
			t.Errorf("state %d: %q, want %q", int(st), got, want)
		}
	}
}

// TestTreeStateMoves: forward only, a kill from running or stopping.
func TestTreeStateMoves(t *testing.T) {
	all := []treeState{treeRunning, treeStopping, treeKilling}
	allowed := map[[2]treeState]bool{
		{treeRunning, treeStopping}: true,
		{treeRunning, treeKilling}:  true,
		{treeStopping, treeKilling}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got, want := from.canMoveTo(to), allowed[[2]treeState{from, to}]; got != want {
				t.Errorf("%s → %s: allowed %v, want %v", from, to, got, want)
			}
		}
	}
}

// TestTreeEndChannels: each state's timers are the only ones the loop
// hears, and a quick stop's watch ends with the kill.
func TestTreeEndChannels(t *testing.T) {
	var e treeEnd
	defer e.stopTimers()
	if e.graceC() != nil || e.pollC() != nil || e.killC() != nil || e.watching() {
		t.Fatal("running: a stop's channel is live")
	}
	e.enter(treeStopping)
	e.quick = true
	e.graceTimer, e.pollTicker = time.NewTimer(time.Hour), time.NewTicker(time.Hour)
	if e.graceC() == nil || e.pollC() == nil || e.killC() != nil || !e.watching() {
		t.Fatal("stopping quickly: want the grace and the watch")
	}
	e.enter(treeKilling)
	e.killTicker = time.NewTicker(time.Hour)
	if e.graceC() != nil || e.pollC() != nil || e.killC() == nil || e.watching() {
		t.Fatal("killing: want the kill's ticks alone")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("killing → stopping did not panic")
			}
		}()
		e.enter(treeStopping)
	}()
}
