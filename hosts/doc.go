// Package hosts turns what names the nodes of a job into []Host, in launch
// order: a --hosts list (Parse), a DeepSpeed or MPI hostfile
// (ParseHostfile), a Slurm allocation (FromSlurm, with SlurmStep telling a
// task of an srun step apart, and ExpandSlurmHostlist and its inverse
// Compress for Slurm's node[1-3,7] form), and DeepSpeed's --include and
// --exclude filters (ApplyIncludeExclude). Resolve picks among them with
// gorun's precedence; it is the one entry point main uses.
//
// Every source refuses the same things the same way: a name that cannot
// name a node (CheckName), a host listed twice (localhost, 127.0.0.1 and
// ::1 counting as one), a slot count that is not a positive number. Errors
// are *userr.InputError values located by column or line.
//
// hosts does no I/O: callers pass a hostfile's contents, and the
// environment as a lookup function (os.Getenv in main), so the same input
// always yields the same hosts. It keeps no state, nothing blocks, and
// every function is safe for concurrent use. Alike, which gathers the
// hosts that get the same notice into one line, is a value its caller owns.
package hosts
