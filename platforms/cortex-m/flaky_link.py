#!/usr/bin/env python3
"""A TCP relay between the device (QEMU's serial bridge) and edgefl-server that damages the
server's TLS records on their way to the device, as a bad radio link would.

    flaky_link.py --listen-port-file FILE --server PORT [--flip CONN:RECORD ...] [--switch CONN:PORT]
                  [--log FILE]

Listens on 127.0.0.1 (an ephemeral port, written to FILE), and relays each connection to
127.0.0.1:PORT. --flip CONN:RECORD flips one bit of the last byte of the RECORD-th TLS record the
server sends on connection CONN (both counted from 1): the device's TLS layer must refuse the
record (a bad MAC) and the device must recover. --switch CONN:PORT relays connection CONN and
every later one to 127.0.0.1:PORT instead (another server at the same address, as a device sees
a server whose state was started again). --log writes one line per relayed record. Runs until
killed.
"""
import argparse
import os
import socket
import threading


def parse_pair(text):  # CONN:RECORD for --flip, CONN:PORT for --switch
    conn, number = text.split(":")
    return int(conn), int(number)


class RecordDamager:
    """Splits the server -> device stream into TLS records; damages those it is told to."""

    def __init__(self, conn_no, flips, log):
        self.conn_no = conn_no
        self.flips = {record for conn, record in flips if conn == conn_no}
        self.log = log
        self.pending = b""
        self.count = 0

    def feed(self, data):
        self.pending += data
        out = b""
        while len(self.pending) >= 5:
            length = int.from_bytes(self.pending[3:5], "big")
            if len(self.pending) < 5 + length:
                break
            record = bytearray(self.pending[: 5 + length])
            self.pending = self.pending[5 + length:]
            self.count += 1
            damaged = self.count in self.flips and length > 0
            if damaged:
                record[-1] ^= 0x01
            if self.log:
                self.log(f"conn {self.conn_no} record {self.count} type {record[0]} length {length}"
                         f"{' FLIPPED' if damaged else ''}")
            out += bytes(record)
        return out


def relay(device, server_port, conn_no, flips, log):
    try:
        server = socket.create_connection(("127.0.0.1", server_port))
    except OSError:
        device.close()
        return
    damager = RecordDamager(conn_no, flips, log)

    def up():  # device -> server, untouched
        try:
            while True:
                data = device.recv(65536)
                if not data:
                    break
                server.sendall(data)
        except OSError:
            pass
        finally:
            try:
                server.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    threading.Thread(target=up, daemon=True).start()
    try:
        while True:
            data = server.recv(65536)
            if not data:
                break
            out = damager.feed(data)
            if out:
                device.sendall(out)
    except OSError:
        pass
    finally:
        # shutdown() first: it sends the FIN and wakes the other thread's recv(); close() alone
        # would leave the connection open while that thread holds the socket.
        for s in (device, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        if log:
            log(f"conn {conn_no} closed")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen-port-file", required=True)
    parser.add_argument("--server", type=int, required=True, help="the server's port on 127.0.0.1")
    parser.add_argument("--flip", type=parse_pair, action="append", default=[])
    parser.add_argument("--switch", type=parse_pair, help="CONN:PORT: from connection CONN on, that server")
    parser.add_argument("--log")
    args = parser.parse_args()
    lock = threading.Lock()
    log_file = open(args.log, "a", buffering=1) if args.log else None

    def log(line):
        if log_file:
            with lock:
                log_file.write(line + "\n")

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    with open(args.listen_port_file + ".tmp", "w") as f:
        f.write(f"{listener.getsockname()[1]}\n")
    os.replace(args.listen_port_file + ".tmp", args.listen_port_file)
    conn_no = 0
    while True:
        device, _ = listener.accept()
        device.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn_no += 1
        server_port = args.server
        if args.switch and conn_no >= args.switch[0]:
            server_port = args.switch[1]
        log(f"conn {conn_no} open to port {server_port}")
        threading.Thread(target=relay, args=(device, server_port, conn_no, args.flip, log), daemon=True).start()


if __name__ == "__main__":
    main()
