// Package inputfile reads the small files a user names on the command line
// or in a config file: hostfiles, ssh_config and its Include files,
// known_hosts, identity files, topology captures.
//
// It owns one guarantee: reading such a file returns promptly with a bounded
// amount of memory, whatever the name points at. A path that is a named
// pipe with no writer, /dev/zero, /dev/urandom, a socket or a directory is
// refused with an error that says what it is, and a regular file over the
// caller's limit is refused with its size, instead of gorun hanging or
// filling memory before it has connected to anything.
//
// It never writes, never follows a name twice (the file checked is the file
// read: the check is an fstat of the opened descriptor, not a stat of the
// name), and keeps no state. Read takes no context: it cannot block on
// anything but the file system itself. It is safe for concurrent use.
package inputfile
