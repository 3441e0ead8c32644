package preflight

// Severity grades a finding. Order matters: fail is worse than warn is worse
// than ok.
type Severity string

// Severities, best first.
const (
	SeverityOK   Severity = "ok"
	SeverityWarn Severity = "warn"
	SeverityFail Severity = "fail"
)

// rank orders severities for sorting: fail 2, warn 1, ok 0.
func (s Severity) rank() int {
	switch s {
	case SeverityFail:
		return 2
	case SeverityWarn:
		return 1
	}
	return 0
}

// Finding is one check's verdict on a node (or across nodes).
type Finding struct {
	ID       string   `json:"id"`       // stable, dotted: "driver.modules", "gpu.ecc"
	Severity Severity `json:"severity"` // ok, warn or fail
	Message  string   `json:"message"`  // one sentence a user can act on
	Evidence string   `json:"evidence"` // what was seen, quoted from the facts
	Remedy   string   `json:"remedy"`   // what to do; empty when nothing is needed
}
