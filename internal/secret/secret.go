package secret

import (
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// Hidden stands in for a secret (or the secret part of a value) in
// anything gorun prints.
const Hidden = "<hidden>"

// secretSegment reports whether one '_'-separated segment of a name marks a
// credential.
func secretSegment(s string) bool {
	switch s {
	case "PASS", "PASSWD", "PASSWORD", "PASSWORDS", "PASSPHRASE", "PWD", "PW",
		"PAT", // personal access token: GITHUB_PAT, GH_PAT
		"TOKEN", "TOKENS", "SECRET", "SECRETS",
		"KEY", "KEYS", "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "ACCOUNTKEY", "SSHKEY",
		"CREDENTIAL", "CREDENTIALS", "CRED", "CREDS",
		"AUTH", "OAUTH", "AUTHORIZATION", "COOKIE", "COOKIES",
		"SESSION", // session ids are bearer credentials; XDG_SESSION_ID hidden costs nothing
		"PRIVATE", "PSK",
		"DSN",              // connection strings: SENTRY_DSN carries a key
		"SIG", "SIGNATURE": // signed URLs: Azure SAS sig=, S3 X-Amz-Signature=
		return true
	}
	return false
}

// secretSubstrings mark a credential anywhere in a name: names run words
// together (PGPASSWORD, SSHPASS, HFTOKEN), and these never occur in an
// innocent one except the exempt names. An array, returned by value, so
// no caller can change the rule.
func secretSubstrings() [11]string {
	return [...]string{
		"PASSWORD", "PASSWD", "PASSPHRASE", "SSHPASS", "SECRET", "TOKEN", "CREDENTIAL",
		"APIKEY", "ACCESSKEY", "PRIVATEKEY", "CONNECTION_STRING",
	}
}

// exemptName reports whether a name the word rules would hide is known to
// hold no credential. The list is short on purpose: an unknown name that
// looks secret stays hidden.
func exemptName(upper string) bool {
	switch upper {
	case "PWD", "OLDPWD": // the shell's working directories, not passwords (MYSQL_PWD is one)
		return true
	case "NCCL_PAT_ENABLE": // NCCL's PAT (Parallel Aggregated Trees) algorithm, not a token
		return true
	case "TOKENIZERS_PARALLELISM": // Hugging Face tokenizers' true/false thread switch
		return true
	case "SSH_AUTH_SOCK":
		// The path of ssh-agent's socket. The keys stay inside the agent,
		// and the socket's file permissions, not the secrecy of its path,
		// keep other users out; the path helps debug agent forwarding.
		return true
	}
	return false
}

// IsSecret reports whether the variable name looks like it holds a
// credential. Plans, preflight facts and findings are printed, pasted into
// tickets and kept in logs, so such values never appear there (see Redact);
// the job itself gets every value unchanged. The rule errs towards hiding:
// a hidden non-secret costs a reader a look elsewhere, a printed secret has
// to be revoked.
//
// In upper case, and unless it is one of a few exempt names (PWD, OLDPWD,
// NCCL_PAT_ENABLE, TOKENIZERS_PARALLELISM, SSH_AUTH_SOCK), a name is secret
// when
//
//   - one of its segments (split at '_'; the whole name when it has none)
//     is a secret word: PASS, PASSWD, PASSWORD, PASSPHRASE, PWD, PW, PAT,
//     TOKEN, SECRET, KEY, KEYS, APIKEY, ACCESSKEY, SECRETKEY, PRIVATEKEY,
//     CREDENTIAL, CREDENTIALS, CRED, CREDS, AUTH, OAUTH, AUTHORIZATION,
//     COOKIE, SESSION, PRIVATE, PSK, DSN, SIG, SIGNATURE (and plurals):
//     DB_PASSWORD, MYSQL_PWD, GITHUB_PAT, WANDB_API_KEY, NCCL_PLUGIN_API_KEY.
//     Segments, not substrings, so NCCL_IB_PKEY (an InfiniBand partition
//     key), PATH and GIT_AUTHOR_NAME stay visible; or
//   - it contains PASSWORD, PASSWD, PASSPHRASE, SSHPASS, SECRET, TOKEN,
//     CREDENTIAL, APIKEY, ACCESSKEY, PRIVATEKEY or CONNECTION_STRING, words
//     run together in names such as PGPASSWORD, SSHPASS and HFTOKEN.
func IsSecret(name string) bool {
	upper := strings.ToUpper(name)
	if exemptName(upper) {
		return false
	}
	for _, w := range secretSubstrings() {
		if strings.Contains(upper, w) {
			return true
		}
	}
	for _, seg := range strings.FieldsFunc(upper, notAlnum) {
		if secretSegment(seg) {
			return true
		}
	}
	return false
}

// Redact returns the form of a variable's value that gorun may print. The
// whole value is hidden when the name is secret (IsSecret) or the value
// holds a PEM private key. Otherwise, whatever the name, these parts of it
// are hidden:
//
//   - the password of a URL with credentials: scheme://user:password@host
//     becomes scheme://user:<hidden>@host, and scheme://token@host, a user
//     part alone (often a token), becomes scheme://<hidden>@host;
//   - what is assigned to a secret key inside the value: ?access_token=,
//     Password=...;, --api-key=;
//   - tokens of a published credential shape: GitHub (ghp_..., github_pat_),
//     GitLab (glpat-), Hugging Face (hf_), Slack (xoxb-), sk- keys, AWS
//     access key ids (AKIA...).
//
// name may be empty for a value without one. Redact is idempotent.
func Redact(name, value string) string {
	if IsSecret(name) {
		return Hidden
	}
	if strings.Contains(value, "PRIVATE KEY-----") {
		return Hidden
	}
	value = redactUserinfo(value)
	value = redactAssignments(value)
	return tokenShape().ReplaceAllString(value, Hidden)
}

// redactUserinfo hides the password of every scheme://user:password@host
// in s, or the whole user part when it has no password. As in RFC 3986 the
// authority ends at the first '/', '?' or '#', and the user part at its
// last '@' (so an unescaped '@' in a password is hidden too).
func redactUserinfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, "/?#\"'<> \t\r\n")
		if end < 0 {
			end = len(s)
		}
		at := strings.LastIndexByte(s[:end], '@')
		if at < 0 {
			continue
		}
		if user, _, hasPassword := strings.Cut(s[:at], ":"); hasPassword {
			b.WriteString(user + ":" + Hidden)
		} else {
			b.WriteString(Hidden)
		}
		s = s[at:]
	}
}

// redactAssignments hides what follows KEY= in s when KEY is a secret
// name: query parameters (?access_token=...), connection strings
// (Password=...;) and options (--api-key=...). The hidden part ends at '&',
// ';', ',', white space or a quote.
func redactAssignments(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			continue
		}
		start := i
		for start > 0 && keyByte(s[start-1]) {
			start--
		}
		key := strings.TrimLeft(s[start:i], "-.")
		if key == "" || !IsSecret(key) {
			continue
		}
		end := i + 1
		for end < len(s) && !strings.ContainsRune("&;, \t\r\n\"'", rune(s[end])) {
			end++
		}
		if end == i+1 {
			continue
		}
		b.WriteString(s[done : i+1])
		b.WriteString(Hidden)
		done, i = end, end-1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// notAlnum splits names into segments: '_' in variable names, '-' and '.'
// in keys inside values (X-Amz-Signature).
func notAlnum(r rune) bool {
	return !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9')
}

// keyByte reports whether c can be part of the key of an assignment inside
// a value.
func keyByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// tokenShape matches credentials by their published prefixes: GitHub
// (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), GitLab (glpat-), Hugging Face
// (hf_), Slack (xox?-), OpenAI and others (sk-), AWS access key ids (AKIA,
// ASIA). The lengths keep short words with those prefixes visible.
var tokenShape = lazyre.New(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}|` +
	`hf_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|(?:AKIA|ASIA)[A-Z0-9]{16})`)

// redactAssignment is --env's value as it may be printed: NAME=VALUE with
// the value through Redact under its name; a NAME alone (its value is the
// head's, never on the command line) through Redact without one.
func redactAssignment(a string) string {
	k, v, ok := strings.Cut(a, "=")
	if !ok {
		return Redact("", a)
	}
	return k + "=" + Redact(k, v)
}

// RedactArgs returns a command line as it may be printed: each --env
// KEY=VALUE with its value through Redact under its name, every other
// argument through Redact without one (URL passwords, --api-key=...,
// token shapes).
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch {
		case i > 0 && args[i-1] == "--env":
			out[i] = redactAssignment(a)
		case strings.HasPrefix(a, "--env="):
			out[i] = "--env=" + redactAssignment(strings.TrimPrefix(a, "--env="))
		default:
			out[i] = Redact("", a)
		}
	}
	return out
}
