package kv

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps exactly one of
// them, so callers can classify with errors.Is and still log the numbers.
var (
	// ErrPoolFull: not enough free pages for an allocation. Capacity is a
	// load condition (overload), never a reason to carry on with less.
	ErrPoolFull = errors.New("kv pool full")
	// ErrQuota: the tenant would exceed its configured page quota.
	ErrQuota = errors.New("kv tenant page quota exceeded")
	// ErrOwnership: a page's owner tag did not match what the page table
	// expected. It is always an internal fault, and it is counted.
	ErrOwnership = errors.New("kv page ownership check failed")
	// ErrReadOnly: a write to a shared (prefix-cache) page.
	ErrReadOnly = errors.New("kv page is shared and read-only")
	// ErrFreed: a call on a sequence after Free.
	ErrFreed = errors.New("kv sequence already freed")
	// ErrRange: a layer, position or buffer outside what the call allows.
	ErrRange = errors.New("kv position out of range")
	// ErrReleased: a lease or shared reference released twice or unknown.
	ErrReleased = errors.New("kv reference already released")
	// ErrConfig: a pool configuration that cannot work.
	ErrConfig = errors.New("kv pool configuration invalid")
)

// PoolFullError says how many pages an allocation needed and how many were
// free. It matches ErrPoolFull.
type PoolFullError struct {
	Need, Free, Pages, PageSize int
}

func (e *PoolFullError) Error() string {
	return fmt.Sprintf("kv pool full: need %d pages (%d tokens), %d of %d pages free (page size %d)",
		e.Need, uint64(e.Need)*uint64(e.PageSize), e.Free, e.Pages, e.PageSize)
}

// Is makes errors.Is(err, ErrPoolFull) true.
func (e *PoolFullError) Is(target error) bool { return target == ErrPoolFull }

// QuotaError says which tenant hit its page quota and by how much. It
// matches ErrQuota.
type QuotaError struct {
	Tenant            string
	Used, Need, Limit int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("kv quota: tenant %q uses %d pages, needs %d more, limit is %d", e.Tenant, e.Used, e.Need, e.Limit)
}

// Is makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

// OwnershipError describes a failed tag check. It deliberately names only
// the page and generations, never the other owner's tenant or request: the
// message may end up in a log line tied to the failing request.
type OwnershipError struct {
	Page             int
	WantGen, HaveGen uint64
	Reason           string
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("kv ownership: page %d: %s (table expects generation %d, page is at generation %d)",
		e.Page, e.Reason, e.WantGen, e.HaveGen)
}

// Is makes errors.Is(err, ErrOwnership) true.
func (e *OwnershipError) Is(target error) bool { return target == ErrOwnership }
