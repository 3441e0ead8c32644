package secret

import (
	"slices"
	"strings"
	"testing"
)

func TestIsSecret(t *testing.T) {
	tests := []struct {
		name   string
		secret bool
	}{
		// Credentials, the measured defects first.
		{"DB_PASSWORD", true},
		{"SSHPASS", true},
		{"GITHUB_PAT", true},
		{"NCCL_PLUGIN_API_KEY", true},
		{"HF_TOKEN", true},
		{"HUGGING_FACE_HUB_TOKEN", true},
		{"WANDB_API_KEY", true},
		{"AWS_SECRET_ACCESS_KEY", true},
		{"AWS_ACCESS_KEY_ID", true},
		{"AWS_SESSION_TOKEN", true},
		{"PGPASSWORD", true},
		{"MYSQL_PWD", true},
		{"REDIS_PASS", true},
		{"SMTP_PASSWD", true},
		{"OPENAI_APIKEY", true},
		{"NVIDIA_API_KEY", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", true}, // a path, hidden anyway: the rule errs towards hiding
		{"SSL_KEY_FILE", true},
		{"GH_AUTH", true},
		{"SENTRY_DSN", true},
		{"SESSION_COOKIE", true},
		{"AZURE_STORAGE_CONNECTION_STRING", true},
		{"GIT_SSH_PRIVATE", true},
		{"hf_token", true}, // names are compared in upper case
		{"TOKEN", true},
		{"HFTOKEN", true},
		{"MYSECRET", true},
		// Not credentials.
		{"NCCL_IB_PKEY", false}, // an InfiniBand partition key
		{"UCX_IB_PKEY", false},
		{"NCCL_PAT_ENABLE", false}, // NCCL's PAT algorithm
		{"PWD", false},
		{"OLDPWD", false},
		{"SSH_AUTH_SOCK", false},
		{"TOKENIZERS_PARALLELISM", false},
		{"PATH", false},
		{"LD_LIBRARY_PATH", false},
		{"GIT_AUTHOR_NAME", false},
		{"NCCL_SOCKET_IFNAME", false},
		{"MASTER_ADDR", false},
		{"KEYBOARD_LAYOUT", false},
		{"PASSTHROUGH_MODE", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsSecret(tt.name); got != tt.secret {
				t.Errorf("IsSecret(%q) = %t, want %t", tt.name, got, tt.secret)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name, varName, value, want string
	}{
		{"secret name", "HF_TOKEN", "hf_abc", "<hidden>"},
		{"secret name, empty value", "DB_PASSWORD", "", "<hidden>"},
		{"plain value", "NCCL_DEBUG", "INFO", "INFO"},
		{"partition key shown", "NCCL_IB_PKEY", "0x8001", "0x8001"},
		{"url with password", "DATABASE_URL", "postgres://app:hunter2@db:5432/x", "postgres://app:<hidden>@db:5432/x"},
		{"url with token as user", "HF_ENDPOINT", "https://tok123@hf.example.com", "https://<hidden>@hf.example.com"},
		{"url without credentials", "HF_ENDPOINT", "https://hf.example.com/a@b", "https://hf.example.com/a@b"},
		{"url, '@' in password", "PROXY", "http://u:p@ss@proxy:3128", "http://u:<hidden>@proxy:3128"},
		{"two urls", "PIP_EXTRA_INDEX_URL", "https://a:1@x/simple https://b:2@y/simple", "https://a:<hidden>@x/simple https://b:<hidden>@y/simple"},
		{"url in a name-less value", "", "see ftp://me:pw@h", "see ftp://me:<hidden>@h"},
		{"query token", "TORCH_CKPT", "https://h/c.pt?x=1&access_token=abc&y=2", "https://h/c.pt?x=1&access_token=<hidden>&y=2"},
		{"azure sas signature", "BLOB", "https://a.blob.core.windows.net/c?sv=2020&sig=AbC%3D", "https://a.blob.core.windows.net/c?sv=2020&sig=<hidden>"},
		{"connection string", "DB", "Server=h;User Id=u;Password=pw;", "Server=h;User Id=u;Password=<hidden>;"},
		{"option in a value", "EXTRA_ARGS", "--lr=3 --api-key=abc --n=2", "--lr=3 --api-key=<hidden> --n=2"},
		{"assignment of a non-secret", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "expandable_segments:True"},
		{"exact-name NCCL list", "NCCL_IB_HCA", "=mlx5_0:1", "=mlx5_0:1"},
		{"github token", "NCCL_NOTE", "x ghp_" + strings.Repeat("a1", 18) + " y", "x <hidden> y"},
		{"hugging face token", "ARGS", "hf_" + strings.Repeat("Ab", 17), "<hidden>"},
		{"aws key id", "ARGS", "AKIAIOSFODNN7EXAMPLE", "<hidden>"},
		{"short word with a prefix", "ARGS", "sk-learn hf_x task-1", "sk-learn hf_x task-1"},
		{"pem key", "ARGS", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----", "<hidden>"},
		{"working directory", "PWD", "/home/me", "/home/me"},
		{"agent socket", "SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1", "/tmp/ssh-x/agent.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.varName, tt.value)
			if got != tt.want {
				t.Errorf("Redact(%q, %q) = %q, want %q", tt.varName, tt.value, got, tt.want)
			}
			if again := Redact(tt.varName, got); again != got {
				t.Errorf("Redact is not idempotent: %q, then %q", got, again)
			}
		})
	}
}

func TestRedactArgs(t *testing.T) {
	got := RedactArgs([]string{"--env", "HF_TOKEN=abc", "--env=DB_PASSWORD=x", "--env", "A=1", "--env", "WANDB_API_KEY", "--env=B", "train.py", "--api-key=k1", "https://u:pw@h/x"})
	want := []string{"--env", "HF_TOKEN=<hidden>", "--env=DB_PASSWORD=<hidden>", "--env", "A=1", "--env", "WANDB_API_KEY", "--env=B", "train.py", "--api-key=<hidden>", "https://u:<hidden>@h/x"}
	if !slices.Equal(got, want) {
		t.Errorf("RedactArgs = %q\nwant %q", got, want)
	}
}
