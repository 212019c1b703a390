package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
)

// CreateVolume makes a named volume: a file system of opts.SizeBytes (0:
// 1 GiB) that outlives the sandboxes that mount it (CreateOptions.Volumes).
// errdefs.ErrAlreadyExists when the name is taken.
func (c *Client) CreateVolume(ctx context.Context, opts CreateVolumeOptions) (*Volume, error) {
	var v Volume
	if err := c.do(ctx, http.MethodPost, "/v1/volumes", opts, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ListVolumes returns the volumes, sorted by name.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var l rest.VolumeList
	if err := c.do(ctx, http.MethodGet, "/v1/volumes", nil, &l); err != nil {
		return nil, err
	}
	return l.Volumes, nil
}

// InspectVolume returns the volume name (errdefs.ErrNotFound when there is
// none), with the sandboxes that mount it.
func (c *Client) InspectVolume(ctx context.Context, name string) (*Volume, error) {
	p, err := volumePath(name)
	if err != nil {
		return nil, err
	}
	var v Volume
	if err := c.do(ctx, http.MethodGet, p, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// RemoveVolume removes the volume name and its data. It fails with
// errdefs.ErrFailedPrecondition while a sandbox, in any state, mounts it.
func (c *Client) RemoveVolume(ctx context.Context, name string) error {
	p, err := volumePath(name)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}

func volumePath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("volume name must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	return "/v1/volumes/" + url.PathEscape(name), nil
}
