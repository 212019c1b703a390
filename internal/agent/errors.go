package agent

import (
	"errors"
	"io/fs"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// Error classes of the agent. The agent cannot import errdefs (deps_test), so
// it has its own few classes, mapped to Connect codes and HTTP statuses here.
var (
	errNotFound        = errors.New("not found")
	errInvalidArgument = errors.New("invalid argument")
	errAlreadyExists   = errors.New("already exists")
	errPrecondition    = errors.New("failed precondition")
)

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// codeOf classifies err for Connect.
func codeOf(err error) connect.Code {
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, fs.ErrNotExist):
		return connect.CodeNotFound
	case errors.Is(err, errAlreadyExists), errors.Is(err, fs.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, errInvalidArgument), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.EINVAL):
		return connect.CodeInvalidArgument
	case errors.Is(err, errPrecondition), errors.Is(err, unix.ENOTEMPTY):
		return connect.CodeFailedPrecondition
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		return connect.CodePermissionDenied
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return connect.CodeResourceExhausted
	}
	return connect.CodeInternal
}

func connectErr(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(codeOf(err), err)
}

// httpStatus classifies err for the REST endpoints.
func httpStatus(err error) int {
	switch codeOf(err) {
	case connect.CodeNotFound:
		return 404
	case connect.CodeAlreadyExists:
		return 409
	case connect.CodeInvalidArgument:
		return 400
	case connect.CodeFailedPrecondition:
		return 412
	case connect.CodePermissionDenied:
		return 403
	case connect.CodeResourceExhausted:
		return 507
	}
	return 500
}
