"""Turns gRPC's fork handlers off, unless the application chose for itself.

gRPC's core registers ``fork()`` handlers that restart its polling thread in the child.
In a child that only runs another program (``subprocess`` with ``preexec_fn``, as
PySpark starts its JVM; any ``fork`` then ``exec``), that thread can find its epoll
descriptor closed by ``close_fds`` before the ``exec`` and abort the child: a process with
an open :class:`~liftbridge_nats.Client` then fails now and then to start a program.
gRPC's Python layer documents fork support as off unless ``GRPC_ENABLE_FORK_SUPPORT`` is
set; its core defaults to on. The variable is read once, when ``grpc`` is first imported,
so this module runs before any of the package's imports of it. An application that set
the variable keeps its value; one that imported ``grpc`` before this package keeps gRPC's
default.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
