"""eyrie against a real Kubernetes API server, without Kafka.

`api` is an asyncio client for the few calls eyrie makes (list and watch Nodes and Pods, bind a pod, post an
event, mark a pod unschedulable); `translate` turns API objects into eyrie's wire models; `bridge` keeps a
list-and-watch running and hands each translated record to a callback exactly when it changes something.
"""
