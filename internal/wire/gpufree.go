package wire

import "time"

// DefaultGPUFreeTimeout is how long the check waits for the job's GPU
// memory to be freed when the request does not say.
const DefaultGPUFreeTimeout = 10 * time.Second

// GPUFreeRequest says how the check knows the job's processes and how
// long it may wait for them.
type GPUFreeRequest struct {
	// Var and Value mark the job: a process whose environment holds
	// Var=Value is the job's (RunIDVar and the run's id). With Var empty
	// no process is the job's.
	Var   string `json:"var"`
	Value string `json:"value"`
	// TimeoutSeconds bounds the wait for the job's processes to let go
	// of the GPUs; zero means DefaultGPUFreeTimeout.
	TimeoutSeconds float64 `json:"timeout_s,omitempty"`
	// Sweep: first SIGKILL every process of the job on the node, on a GPU
	// or not (a node whose link was lost, before it is used again: the
	// agent tears its tree down once the head's heartbeat stops, and this
	// makes sure).
	Sweep bool `json:"sweep,omitempty"`
}

// Timeout is how long the check may wait.
func (r GPUFreeRequest) Timeout() time.Duration {
	if r.TimeoutSeconds <= 0 {
		return DefaultGPUFreeTimeout
	}
	return time.Duration(r.TimeoutSeconds * float64(time.Second))
}

// GPUFreeAnswer is what the check found on one node.
type GPUFreeAnswer struct {
	// NoGPUs: NVML does not load here, or sees no GPU; nothing was
	// checked, and Reason says which.
	NoGPUs bool   `json:"no_gpus,omitempty"`
	Reason string `json:"reason,omitempty"`
	// GPUs lists every GPU with the processes seen on it during the check.
	GPUs []GPUProcesses `json:"gpus,omitempty"`
	// Waited is how long the check waited for the job's processes to let
	// go of the GPUs (0 when none held any).
	Waited time.Duration `json:"waited_ns"`
	// Free: when the check ended, no process of the job held memory on a
	// GPU it could list.
	Free bool `json:"free"`
	// Errors name what the check could not do (a GPU whose processes it
	// could not list, a kill that failed).
	Errors []string `json:"errors,omitempty"`
	// Swept are the job's processes the sweep found and killed
	// (GPUFreeRequest.Sweep); MemoryMiB is 0 there.
	Swept []GPUProcess `json:"swept,omitempty"`
}

// GPUProcesses is one GPU and the processes seen on it.
type GPUProcesses struct {
	Index     int          `json:"index"`
	UUID      string       `json:"uuid,omitempty"`
	Processes []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is one process NVML listed on a GPU (as a compute or a
// graphics process).
type GPUProcess struct {
	PID int `json:"pid"`
	// Command is its /proc/PID/cmdline, arguments joined by spaces, cut to
	// 200 characters, control characters escaped.
	Command string `json:"command"`
	// MemoryMiB is the most GPU memory it was seen holding; -1 when NVML
	// does not say.
	MemoryMiB int64 `json:"memory_mib"`
	Job       bool  `json:"job"`    // its environment holds the request's marker
	Killed    bool  `json:"killed"` // the check sent it SIGKILL
	// Held: it still held GPU memory when the check ended.
	Held bool `json:"held,omitempty"`
}
