package jobs

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Middleware wraps a Func.
type Middleware func(Func) Func

// Chain returns a Middleware that applies mws so that the first is the
// outermost: Chain(a, b)(f) runs a(b(f)).
func Chain(mws ...Middleware) Middleware {
	return func(fn Func) Func {
		for i := len(mws) - 1; i >= 0; i-- {
			fn = mws[i](fn)
		}
		return fn
	}
}

// PanicError is the error of a run that panicked.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("jobs: panic: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recover turns a panic in the wrapped Func into a *PanicError with the stack.
func Recover() Middleware {
	return func(fn Func) Func {
		return func(ctx context.Context, run Run) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return fn(ctx, run)
		}
	}
}

// Timeout ends the wrapped Func's context after d, with cause ErrTimeout. A
// Func that returns its context's error once the timeout has passed (plain
// context.DeadlineExceeded) gets the cause added, so the error says why and
// errors.Is(err, ErrTimeout) holds. A run that ignores its context is not
// stopped: Go cannot stop it.
func Timeout(d time.Duration) Middleware {
	return func(fn Func) Func {
		return func(ctx context.Context, run Run) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("%w after %v", ErrTimeout, d))
			defer cancel()
			err := fn(ctx, run)
			if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrTimeout) &&
				errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			return err
		}
	}
}
