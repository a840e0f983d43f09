"""Container images for the real node, built without a registry or a container engine.

A Debian root filesystem (debootstrap) and locally compiled or installed files are packed into
OCI archives, cached per machine, and imported into the node's containerd.
"""
