package envplan

import "strings"

// hiddenValue stands in for a secret's value in a rendered plan.
const hiddenValue = "<hidden>"

// secretWords mark variable names whose values are credentials
// (WANDB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...). Plans are printed,
// pasted into tickets and kept in logs, so those values never appear there;
// the job itself gets them unchanged.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"}

// IsSecret reports whether the variable name looks like it holds a credential.
func IsSecret(name string) bool {
	upper := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(upper, w) {
			return true
		}
	}
	return false
}
