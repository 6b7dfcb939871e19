#!/usr/bin/env python3
"""Drives `qwenrt chat` through a pseudo-terminal, as a person would: send a message and
read the streamed reply, /stats, a second turn that reuses the cached conversation, /reset,
Ctrl-C during an answer (the answer stops, the program stays), Ctrl-C at the prompt (the
line is dropped, the conversation stays; also sent the moment the prompt shows, and as a
SIGINT from elsewhere), then /exit; line editing (arrows, history, deleting words, a paste of
two lines, Ctrl-D) and the terminal's own line mode under TERM=dumb. Also checks
piped stdin, a long conversation in a small context (the oldest turns are dropped) and a
message too long for the context. The model is a 1-layer Qwen3 with Qwen's vocabulary and
random weights, written here, next to Qwen's real tokenizer.

    chat_pty_test.py QWENRT_BINARY FETCH_SCRIPT CACHE_DIR
"""
import array
import fcntl
import json
import os
import re
import pty
import random
import select
import signal
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time


def write_model(folder, tokenizer_dir):
    hidden, inter, heads, kv_heads, head_dim, vocab = 8, 16, 2, 1, 8, 151936
    config = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": hidden, "intermediate_size": inter,
              "num_hidden_layers": 1, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "head_dim": head_dim, "vocab_size": vocab, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 16384, "rope_theta": 1e6, "tie_word_embeddings": True,
              "eos_token_id": 151645}
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    p = "model.layers.0."
    shapes.update({p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                   p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
                   p + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
                   p + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
                   p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                   p + "self_attn.q_norm.weight": [head_dim], p + "self_attn.k_norm.weight": [head_dim],
                   p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
                   p + "mlp.down_proj.weight": [hidden, inter]})
    rng = random.Random(3)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        data = array.array("f", (rng.gauss(0, 1) for _ in range(count))).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), folder)


class Terminal:
    def __init__(self, argv, term=None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            env = dict(os.environ)
            if term is not None:
                env["TERM"] = term
            os.execve(argv[0], argv, env)
        self.buffer = b""

    def read_until(self, needle, timeout=30.0):
        deadline = time.time() + timeout
        while needle not in self.buffer:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {needle!r}; got {self.buffer[-400:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"chat ended while waiting for {needle!r}; got {self.buffer[-400:]!r}")
                self.buffer += chunk
        at = self.buffer.index(needle) + len(needle)
        seen, self.buffer = self.buffer[:at], self.buffer[at:]
        return seen

    def send(self, data):
        os.write(self.fd, data)

    def wait(self, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 4096)
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("chat did not exit")


def main():
    binary, fetch_script, cache = sys.argv[1], sys.argv[2], sys.argv[3]
    fetched = subprocess.run([fetch_script, cache], capture_output=True, text=True, check=True)
    tokenizer_dir = fetched.stdout.strip().splitlines()[-1]
    folder = tempfile.mkdtemp()
    try:
        write_model(folder, tokenizer_dir)
        argv = [binary, "chat", "-m", folder, "--device", "cpu", "-n", "12000", "--max-context", "16384"]
        term = Terminal(argv)
        term.read_until(b"\n> ")
        # 1. A message gets a streamed reply and a new prompt.
        term.send(b"Hello!\r")
        reply = term.read_until(b"\r\n> ", timeout=120)
        assert len(reply.strip()) > len(b"Hello!"), reply
        # 2. /stats reports the last answer.
        term.send(b"/stats\r")
        stats = term.read_until(b"\n> ")
        assert b"tokens/s" in stats and b"context" in stats, stats
        # 2b. The next turn reuses the cached conversation: only the new part is prefilled.
        term.send(b"And again?\r")
        term.read_until(b"\r\n> ", timeout=120)
        term.send(b"/stats\r")
        stats = term.read_until(b"\n> ")
        found = re.search(rb"prompt (\d+) tokens, (\d+) of them cached", stats)
        assert found and 0 < int(found.group(2)) < int(found.group(1)), stats
        # 3. /reset clears the conversation.
        term.send(b"/reset\r")
        assert b"cleared" in term.read_until(b"\n> ")
        # 4. Ctrl-C while answering stops the answer but not the program.
        term.send(b"Tell me a long story\r")
        time.sleep(0.5)
        term.read_until(b"Tell me a long story")
        time.sleep(0.3)
        term.send(b"\x03")
        stopped = term.read_until(b"\n> ", timeout=30)
        assert b"stopped" in stopped, stopped
        # 4b. Ctrl-C at the prompt drops the line typed so far, not the conversation.
        term.send(b"half a line")
        term.read_until(b"half a line")
        term.send(b"\x03")
        hint = term.read_until(b"\n> ", timeout=30)
        assert b"/exit" in hint, hint
        # 4c. A Ctrl-C sent the moment the prompt shows is seen too, every time (one that came
        # before the chat began to read used to be lost, and the chat waited for a line).
        for _ in range(10):
            term.send(b"\x03")
            hint = term.read_until(b"\n> ", timeout=30)
            assert b"/exit" in hint, hint
        # 4d. A SIGINT sent from elsewhere (kill -INT) drops the typed line as a typed Ctrl-C does:
        # the terminal flushes its input only for the one typed.
        term.send(b"half")
        term.read_until(b"half")
        os.kill(term.pid, signal.SIGINT)
        assert b"/exit" in term.read_until(b"\n> ", timeout=30)
        term.send(b"/stats\r")  # "half/stats" would be a message, answered
        stats = term.read_until(b"\n> ")
        assert b"tokens/s" in stats, stats[-300:]
        term.send(b"And then?\r")
        term.read_until(b"\r\n> ", timeout=120)
        term.send(b"/stats\r")
        kept = term.read_until(b"\n> ")
        found = re.search(rb"prompt (\d+) tokens, (\d+) of them cached", kept)
        assert found and int(found.group(2)) > 0, kept  # the turns before the Ctrl-C are still there
        term.send(b"/exit\r")
        assert term.wait() == 0
        # 4e. Line editing (TERM names a terminal that takes escape sequences): a mistyped
        # command mended with the arrows, an earlier line recalled with Up and edited, words
        # deleted, two lines pasted at once, Ctrl-D on an empty line to leave.
        left, up, delete = b"\x1b[D", b"\x1b[A", b"\x1b[3~"
        term = Terminal(argv, term="xterm-256color")
        term.read_until(b"\n> ")
        term.read_until(b"\x1b[?2004h")  # pastes marked while a line is edited
        term.send(b"/sytem be brief" + left * 12 + b"s\r")
        assert b"system prompt set" in term.read_until(b"\n> ")
        term.send(up + b"\x7f" * 5 + b"kind\r")  # Up: "/system be brief"; Backspace x5
        echoed = term.read_until(b"\n> ")
        assert b"\r\x1b[K> /system be kind\r\n" in echoed and b"system prompt set" in echoed, echoed
        term.send(b"hello there /reset\x01\x1bd\x1bd" + delete + b"\r")  # Ctrl-A, Alt-D twice, Delete
        assert b"cleared" in term.read_until(b"\n> ")
        term.send(b"/sats" + left * 3 + b"t\x05 now\x17\r")  # "/stats"; Ctrl-E, " now", Ctrl-W: "/stats "
        assert b"no answer yet" in term.read_until(b"\n> ")  # the conversation was cleared
        # Stopped and continued (as after Ctrl-Z and fg): the line is drawn again and edited
        # as before, the terminal back in editing's mode (no line mode, no echo).
        term.send(b"/hel")
        term.read_until(b"/hel")
        os.kill(term.pid, signal.SIGSTOP)
        os.kill(term.pid, signal.SIGCONT)
        term.read_until(b"\r> /hel\x1b[K")
        lflag = termios.tcgetattr(term.fd)[3]
        assert not lflag & (termios.ICANON | termios.ECHO), lflag
        # Ctrl-Z (SIGTSTP) where nothing can stop the program (its process group has no shell):
        # editing goes on in its own mode.
        os.kill(term.pid, signal.SIGTSTP)
        term.read_until(b"\r> /hel\x1b[K")
        lflag = termios.tcgetattr(term.fd)[3]
        assert not lflag & (termios.ICANON | termios.ECHO), lflag
        # A narrower terminal (SIGWINCH): the line is drawn again to fit, around the cursor.
        term.send(b"p me with this long line" + left * 5)
        term.read_until(b"long line")
        fcntl.ioctl(term.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 12, 0, 0))
        # 12 columns: 2 for "> ", 9 of text (up to the cursor's character), the last kept free.
        term.read_until(b"\r> his long \x1b[K\x1b[1D")
        term.send(b"\x0b" + b"\x17" * 4 + b"\r")  # Ctrl-K, then Ctrl-W back to "/help "
        assert b"commands:" in term.read_until(b"\n> ")
        term.send(b"tats\x17/s\x19\r")  # Ctrl-W cuts "tats", Ctrl-Y puts it back after "/s": "/stats"
        assert b"; context " in term.read_until(b"\n> ")  # what /stats tells
        fcntl.ioctl(term.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # wide again
        term.send(b"\x12sta")  # Ctrl-R: the newest line with "sta", the query in the prompt's place
        term.read_until(b"(reverse-i-search)`sta': /stats")
        term.send(b"\r")
        assert b"; context " in term.read_until(b"\n> ")
        term.send(b"junk\x15/reset\r/stats\r")  # Ctrl-U; two lines in one write
        pasted = term.read_until(b"; context ")
        assert b"cleared" in pasted, pasted
        term.read_until(b"\n> ")
        # Keys, Ctrl-C, more keys and Enter in one read: the Ctrl-C drops the line at the
        # prompt (no answer starts stopped).
        term.send(b"abc\x03def\r")
        dropped = term.read_until(b"\n> ")
        term.send(b"/stats\r")
        dropped += term.read_until(b"\n> ")
        assert b"^C" in dropped and b"/exit" in dropped and b"stopped" not in dropped, dropped
        # A bracketed paste of two lines is one message; so is a line ended with a backslash.
        term.send(b"\x1b[200~/foo\r\nbar\x1b[201~\r")
        pasted = term.read_until(b"\n> ")
        assert b"unknown command /foo\r\nbar;" in pasted, pasted
        term.send(b"/foo\\\rbaz\r")
        assert b"unknown command /foo\r\nbaz;" in term.read_until(b"\n> ")
        # A pasted Ctrl-D is text (dropped), not the end of input.
        term.send(b"\x1b[200~\x04\x1b[201~/foo\r")
        assert b"unknown command /foo;" in term.read_until(b"\n> ")
        # Ctrl-C during an answer also drops the lines pasted behind it: /reset is not run.
        term.send(b"Tell me a long story\r/reset\r")
        term.read_until(b"Tell me a long story")
        time.sleep(0.5)
        term.send(b"\x03")
        stopped = term.read_until(b"\n> ", timeout=30)
        assert b"stopped" in stopped, stopped
        term.send(b"/stats\r")
        after = term.read_until(b"\n> ")
        assert b"tokens/s" in after and b"cleared" not in stopped + after, stopped + after
        term.send(b"\x04")
        assert term.wait() == 0
        # SIGTERM while a line is edited ends the program with the terminal's own mode back.
        term = Terminal(argv, term="xterm-256color")
        term.read_until(b"\n> ")
        term.send(b"half")
        term.read_until(b"half")
        assert not termios.tcgetattr(term.fd)[3] & termios.ICANON
        os.kill(term.pid, signal.SIGTERM)
        assert term.wait() == -signal.SIGTERM
        lflag = termios.tcgetattr(term.fd)[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO, lflag
        # 4f. TERM=dumb: the terminal's own line mode, its Backspace included.
        term = Terminal(argv, term="dumb")
        term.read_until(b"\n> ")
        term.send(b"/resex\x7ft\r")
        dumb = term.read_until(b"\n> ")
        assert b"cleared" in dumb and b"\x1b" not in dumb, dumb
        term.send(b"/exit\r")
        assert term.wait() == 0
        # 5. Piped stdin: answers only, one per line of input.
        piped = subprocess.run([binary, "chat", "-m", folder, "--device", "cpu", "-n", "8"],
                               input=b"first\n/reset\nsecond\n", capture_output=True, timeout=120)
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.count(b"\n") == 2, piped.stdout
        assert b"> " not in piped.stdout, piped.stdout
        assert b"cleared" in piped.stderr, piped.stderr
        # 6. A long conversation in a small context drops its oldest turns and goes on.
        many = b"".join(b"message number %d, a few words long\n/stats\n" % i for i in range(8))
        small = subprocess.run([binary, "chat", "-m", folder, "--device", "cpu", "-n", "16",
                                "--max-context", "96"], input=many, capture_output=True, timeout=120)
        assert small.returncode == 0, small.stderr
        contexts = [int(c) for c in re.findall(rb"context (\d+) of 96 tokens", small.stderr)]
        assert len(contexts) == 8 and max(contexts) <= 96, small.stderr
        assert b"oldest turn" in small.stderr, small.stderr
        # 7. A message too long for the context on its own is refused; the chat goes on.
        huge = b"word " * 200 + b"\nshort\n/stats\n"
        refused = subprocess.run([binary, "chat", "-m", folder, "--device", "cpu", "-n", "8",
                                  "--max-context", "96"], input=huge, capture_output=True, timeout=120)
        assert refused.returncode == 1, refused.stderr  # a script sees the unanswered message
        assert b"does not fit" in refused.stderr, refused.stderr
        assert b"1 message was not answered" in refused.stderr, refused.stderr
        assert re.search(rb"last answer: [1-8] tokens?", refused.stderr), refused.stderr
        # 8. A line that is not UTF-8 is left out as such a message is; CR LF line ends are line
        # ends (a file from Windows); /stats after /reset has no answer to tell of.
        crlf = subprocess.run([binary, "chat", "-m", folder, "--device", "cpu", "-n", "4"],
                              input=b"a\xffb\r\nhello\r\n/stats\r\n/reset\r\n/stats\r\n", capture_output=True,
                              timeout=120)
        assert crlf.returncode == 1, crlf.stderr
        assert b"not valid UTF-8 (byte 2 of it)" in crlf.stderr, crlf.stderr
        assert crlf.stdout.count(b"\n") == 1, crlf.stdout  # "hello" answered
        assert re.search(rb"last answer: [1-4] tokens?", crlf.stderr), crlf.stderr
        assert b"no answer yet" in crlf.stderr and b"unknown command" not in crlf.stderr, crlf.stderr
        # 9. Ctrl-C with piped input stops the answer, then the program (exit 130): a script's
        # input is not read on after it.
        proc = subprocess.Popen([binary, "chat", "-m", folder, "--device", "cpu", "-n", "12000",
                                 "--max-context", "16384"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdin.write(b"Tell me a long story\n")
        proc.stdin.flush()
        proc.stdout.read(8)  # the answer has begun
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(input=b"/stats\n", timeout=60)  # not read
        assert proc.returncode == 130, (proc.returncode, err)
        assert b"stopped" in err and b"last answer" not in err, err
        # 10. --history keeps the lines typed at the terminal for later sessions (a message of
        # two lines as one), in a file only its owner reads; piped input is not kept.
        history = os.path.join(folder, "history.txt")
        with_history = [binary, "chat", "-m", folder, "--device", "cpu", "-n", "2", "--history", history]
        term = Terminal(with_history, term="xterm-256color")
        term.read_until(b"\n> ")
        term.send(b"/stats\r")
        term.read_until(b"\n> ")
        term.send(b"\x1b[200~two\r\nlines \\ here\x1b[201~\r")
        term.read_until(b"\r\n> ", timeout=120)
        term.send(b"\x04")
        assert term.wait() == 0
        assert os.stat(history).st_mode & 0o777 == 0o600, oct(os.stat(history).st_mode)
        with open(history, "rb") as f:
            assert f.read() == b"/stats\ntwo\\nlines \\\\ here\n"
        term = Terminal(with_history, term="xterm-256color")
        term.read_until(b"\n> ")
        term.send(b"\x1b[A\x1b[A\r")  # Up twice: the first session's /stats
        assert b"; context " in term.read_until(b"\n> ")
        term.send(b"\x04")
        assert term.wait() == 0
        piped_history = subprocess.run(with_history, input=b"hello\n", capture_output=True, timeout=120)
        assert piped_history.returncode == 0, piped_history.stderr
        with open(history, "rb") as f:
            assert f.read().count(b"\n") == 3  # the second session's /stats; not the piped hello
        print("chat pty test: message, /stats, cached second turn, /reset, Ctrl-C during an answer, /exit, "
              "line editing and history, TERM=dumb, "
              "piped stdin, oldest turns dropped, an oversized message refused, a line not UTF-8, CR LF, --history: ok")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
