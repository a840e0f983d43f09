"""A real Kubernetes node for the local cluster: containerd, runc, CNI bridge, kubelet, kube-proxy.

Pods scheduled to it really run (exec, logs, port-forward, probes and volumes all work), unlike
on kwok's simulated nodes.
"""
