"""The one port to the Kubernetes API, shared by the controller (`admission/`), the webhook
(`webhook/`) and the simulator's control plane (`simulator/`): the small JSON-over-HTTPS client and
its typed resources (`kubeapi`), credentials like kubectl's (`credentials`, `access`), the one
list-then-watch loop (`streamwatch`), who may read a service's answers (`statusauth`) and the
HTTP/1.1 request head both muster servers read (`httpwire`) and the loopback ports its servers
listen on (`listenports`). Imports nothing of muster's but this package."""
