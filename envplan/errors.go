package envplan

import "strings"

// InputError reports input that gorun refuses: a bad flag, a broken hostfile
// line, a Slurm expression Slurm itself would reject. main maps it to exit 2.
type InputError struct {
	Where   string // the flag, file:line:col, or variable at fault
	Problem string // what is wrong, in one sentence
	Fix     string // how to fix it; may be empty
}

func (e *InputError) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString(" (")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}
