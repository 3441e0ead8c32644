module github.com/gorun/gorun

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/hashicorp/go-multierror v1.1.1
	github.com/kevinburke/ssh_config v1.6.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/crypto v0.59.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)
