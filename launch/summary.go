package launch

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/userr"
)

// renderSummary is the closing report of a failed job on Diag: which node and
// rank failed, with what code and why, and the last lines that node printed.
// What it quotes of the workers' and torchrun's text shows control
// characters escaped (userr.Printable: "\x1b[2J"), so that quoting a line
// does not clear the screen or set the title again.
func renderSummary(f Failure, attempts int) string {
	var b strings.Builder
	tries := "1 attempt"
	if attempts != 1 {
		tries = fmt.Sprintf("%d attempts", attempts)
	}
	fmt.Fprintf(&b, "gorun: job failed after %s\n", tries)
	fmt.Fprintf(&b, "  node:   %s\n", f.Node)
	if r := strings.TrimSpace(rankWords(f.Rank, f.LocalRank)); r != "" {
		fmt.Fprintf(&b, "  worker: %s\n", r)
	}
	switch {
	case f.Signal > 0:
		fmt.Fprintf(&b, "  code:   %d (killed by %s)\n", f.Code, signalName(f.Signal))
	case f.Code >= 0:
		fmt.Fprintf(&b, "  code:   %d\n", f.Code)
	}
	if f.Phase != "" {
		fmt.Fprintf(&b, "  phase:  %s\n", f.Phase)
	}
	fmt.Fprintf(&b, "  reason: %s\n", userr.Printable(f.Reason))
	if len(f.LastLines) > 0 {
		if len(f.LastLines) == 1 {
			fmt.Fprintf(&b, "  last line from %s:\n", f.Node)
		} else {
			fmt.Fprintf(&b, "  last %d lines from %s:\n", len(f.LastLines), f.Node)
		}
		for _, l := range f.LastLines {
			fmt.Fprintf(&b, "    %s\n", userr.Printable(l))
		}
	}
	return b.String()
}

// signalName is "SIGKILL" for 9, or "signal 9" for a number it does not know.
func signalName(n int) string { return SignalName(syscall.Signal(n)) }
