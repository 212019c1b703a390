// Package source reads OCI and Docker images from where they are kept and
// hands them over as an image config plus an ordered list of layers, each
// a stream of the uncompressed layer tar. It only reads; storing the layers
// is the caller's business.
//
// Three kinds of source are supported:
//
//   - Registry: a registry speaking the OCI distribution API, with
//     credentials from the docker config file (docker login).
//   - Layout: an OCI image layout directory (oci-layout, index.json,
//     blobs/<alg>/<hex>).
//   - Archive: a tarball, either `docker save` output (manifest.json) or an
//     OCI archive (a tar of an image layout, recognised by its oci-layout
//     entry), optionally compressed with gzip or zstd.
//
// Image indexes (manifest lists) are resolved to the manifest of one
// platform, by default the one this process runs on.
//
// # Trust
//
// Everything read from a source is untrusted: manifests, configs, blobs,
// tar headers, names and sizes. Every blob is checked against the digest
// and size its parent states (manifests against the index, configs and
// layer blobs against the manifest), whether or not the library underneath
// already did, and every layer's uncompressed bytes are checked against the
// diff ID in the image config. The root of that chain is the digest of the
// first manifest: the one in the reference when pulling by digest, or the
// one computed from the bytes received otherwise. A docker save archive has
// no manifest, so its root is the config it names. Layer streams report a
// mismatch as an error wrapping errdefs.ErrDataLoss in place of io.EOF, so
// a consumer that reads a stream to its end (as it must) never accepts
// corrupted content. Manifests, configs and index files are read with size
// limits, archive entries are looked up by exact name in an index built
// from the tar headers (nothing is extracted to disk), and blob file names
// are built only from validated digests.
//
// # Errors
//
// Errors are classified with github.com/containerd/errdefs: a malformed
// reference or an unsupported image is ErrInvalidArgument, a missing image
// or platform ErrNotFound, rejected or missing credentials
// ErrUnauthenticated or ErrPermissionDenied, an unreachable registry
// ErrUnavailable, and content that does not match its digest ErrDataLoss.
package source
