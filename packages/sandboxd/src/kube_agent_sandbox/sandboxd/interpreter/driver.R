# The REPL driver of R contexts: `Rscript driver.R EVENT_FD TOKEN`.
#
# It speaks the protocol of driver.py (the Python worker), so the server drives all languages
# alike: commands arrive as frames on stdin, events (ready, count, result, error, done) leave as
# frames on EVENT_FD, and user output goes to the real fds 1 and 2, with a numbered sync marker
# written to both before each event so the server can order output and events. A frame is a
# 4-byte big-endian length and that many bytes of UTF-8 JSON.
#
# Base R can neither write a NUL byte to stdout nor write to a descriptor it did not open by
# path, so the sync markers are `\x1e\x1fE2B-SYNC-<token>-<seq>\x1f\x1e` (no NUL; r_worker.py
# tells the server), written with cat(), and event frames go to /dev/fd/EVENT_FD opened anew (the
# server hands that pipe to the user R runs as, so the open is allowed).
#
# Only base R is used (no jsonlite): the sandbox may have no CRAN packages. Everything lives in
# an environment whose parent is base, so user code that rm()s or shadows globals cannot break it.

local({
  SYNC_START <- "\x1e\x1fE2B-SYNC-"
  SYNC_END <- "\x1f\x1e"
  MAX_FRAME <- 64 * 1024 * 1024
  MAX_FIELD_CHARS <- 4 * 1024 * 1024
  EVAL_CALL <- quote(eval(expr, envir = .GlobalEnv))
  B64 <- strsplit("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "")[[1]]

  state <- new.env(parent = emptyenv())
  state$seq <- 0
  state$count <- 0
  state$token <- ""
  state$events <- NULL
  state$plot_dir <- ""
  state$plot_seq <- 0
  state$devices <- integer()

  # --- JSON ------------------------------------------------------------------------------------

  json_str <- function(s) {
    s <- enc2utf8(as.character(s))
    bad <- !validUTF8(s)
    if (any(bad)) s[bad] <- iconv(s[bad], "UTF-8", "UTF-8", sub = "\ufffd")
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    if (any(grepl("[\\x01-\\x1f]", s, perl = TRUE))) {
      found <- gregexpr("[\\x01-\\x1f]", s, perl = TRUE)
      regmatches(s, found) <- lapply(regmatches(s, found), function(chars) {
        vapply(chars, function(ch) sprintf("\\u%04x", utf8ToInt(ch)), "")
      })
    }
    paste0("\"", s, "\"")
  }

  to_json <- function(x) {
    if (is.null(x)) return("null")
    if (is.list(x)) {
      if (length(x) && !is.null(names(x))) {
        fields <- vapply(x, to_json, "", USE.NAMES = FALSE)
        return(paste0("{", paste0(json_str(names(x)), ":", fields, collapse = ","), "}"))
      }
      return(paste0("[", paste(vapply(x, to_json, ""), collapse = ","), "]"))
    }
    if (length(x) != 1L) return(to_json(as.list(unname(x))))
    if (is.logical(x)) return(if (isTRUE(x)) "true" else "false")
    if (is.numeric(x)) return(if (is.finite(x)) format(x, scientific = FALSE, digits = 15) else "null")
    json_str(x)
  }

  unescape_one <- function(escape) {
    if (nchar(escape) == 2L) {
      ch <- substr(escape, 2L, 2L)
      return(switch(ch, n = "\n", t = "\t", r = "\r", b = "\b", f = "\f", ch))
    }
    if (nchar(escape) == 12L) {
      high <- strtoi(substr(escape, 3L, 6L), 16L)
      low <- strtoi(substr(escape, 9L, 12L), 16L)
      return(intToUtf8(65536 + (high - 55296) * 1024 + (low - 56320)))
    }
    code <- strtoi(substr(escape, 3L, 6L), 16L)
    # R strings cannot hold NUL, nor a lone surrogate.
    if (code == 0L || (code >= 55296L && code <= 57343L)) return("\ufffd")
    intToUtf8(code)
  }

  json_unescape <- function(token) {
    s <- substr(token, 2L, nchar(token) - 1L)
    if (grepl("\\", s, fixed = TRUE)) {
      pattern <- paste0(
        "\\\\u[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2}",
        "|\\\\u[0-9a-fA-F]{4}|\\\\."
      )
      found <- gregexpr(pattern, s, perl = TRUE)
      regmatches(s, found) <- lapply(regmatches(s, found), function(escapes) {
        vapply(escapes, unescape_one, "", USE.NAMES = FALSE)
      })
    }
    Encoding(s) <- "UTF-8"
    s
  }

  json_parse <- function(text) {
    pattern <- paste0(
      "\"[^\"\\\\]*+(?:\\\\.[^\"\\\\]*+)*+\"",
      "|-?[0-9]+(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null|[][{}:,]"
    )
    tokens <- regmatches(text, gregexpr(pattern, text, perl = TRUE))[[1]]
    pos <- 0L
    take <- function() {
      pos <<- pos + 1L
      if (pos > length(tokens)) stop("truncated JSON")
      tokens[[pos]]
    }
    peek <- function() if (pos < length(tokens)) tokens[[pos + 1L]] else ""
    value <- function() {
      token <- take()
      if (token == "{" || token == "[") {
        object <- token == "{"
        out <- list()
        if (peek() == (if (object) "}" else "]")) {
          take()
          return(out)
        }
        repeat {
          if (object) {
            key <- take()
            if (substr(key, 1L, 1L) != "\"" || take() != ":") stop("bad JSON object")
            out[json_unescape(key)] <- list(value())
          } else {
            out[length(out) + 1L] <- list(value())
          }
          separator <- take()
          if (separator == (if (object) "}" else "]")) return(out)
          if (separator != ",") stop("bad JSON separator")
        }
      }
      if (substr(token, 1L, 1L) == "\"") return(json_unescape(token))
      if (token == "true") return(TRUE)
      if (token == "false") return(FALSE)
      if (token == "null") return(NULL)
      as.numeric(token)
    }
    value()
  }

  # --- frames ----------------------------------------------------------------------------------

  fit_field <- function(text) {
    if (nchar(text) <= MAX_FIELD_CHARS) return(text)
    cut <- nchar(text) - MAX_FIELD_CHARS
    paste0(substr(text, 1L, MAX_FIELD_CHARS), "\n[... ", cut, " characters cut]")
  }

  send <- function(message) suspendInterrupts({
    state$seq <- state$seq + 1
    marker <- paste0(SYNC_START, state$token, "-", format(state$seq, scientific = FALSE), SYNC_END)
    # A marker can only go where user code has not sink()ed the stream; the server waits for
    # markers on the streams an event names only.
    streams <- list()
    if (sink.number() == 0L) {
      cat(marker, file = stdout())
      streams <- c(streams, "stdout")
    }
    if (sink.number(type = "message") == 2L) {
      cat(marker, file = stderr())
      streams <- c(streams, "stderr")
    }
    message$seq <- state$seq
    message$streams <- streams
    body <- charToRaw(to_json(message))
    if (length(body) > MAX_FRAME) {
      message <- lapply(message, function(v) if (is.character(v)) fit_field(v) else v)
      body <- charToRaw(to_json(message))
    }
    size <- length(body)
    header <- as.raw(c(size %/% 16777216, (size %/% 65536) %% 256, (size %/% 256) %% 256, size %% 256))
    writeBin(c(header, body), state$events)
    flush(state$events)
  })

  read_command <- function(input) {
    header <- readBin(input, "raw", 4L)
    if (length(header) < 4L) return(NULL)
    size <- sum(as.numeric(header) * c(16777216, 65536, 256, 1))
    if (size > MAX_FRAME) stop(sprintf("frame of %.0f bytes exceeds the limit", size))
    body <- raw(0)
    while (length(body) < size) {
      chunk <- readBin(input, "raw", size - length(body))
      if (!length(chunk)) return(NULL)
      body <- c(body, chunk)
    }
    text <- rawToChar(body)
    Encoding(text) <- "UTF-8"
    json_parse(text)
  }

  # --- plots -------------------------------------------------------------------------------------

  base64 <- function(bytes) {
    pad <- (3L - length(bytes) %% 3L) %% 3L
    values <- matrix(as.integer(c(bytes, as.raw(integer(pad)))), nrow = 3L)
    triples <- values[1L, ] * 65536L + values[2L, ] * 256L + values[3L, ]
    sextets <- rbind(triples %/% 262144L, (triples %/% 4096L) %% 64L, (triples %/% 64L) %% 64L, triples %% 64L)
    chars <- B64[as.vector(sextets) + 1L]
    if (pad) chars[(length(chars) - pad + 1L):length(chars)] <- "="
    paste(chars, collapse = "")
  }

  # The default device of plot(), hist() ...: a PNG file per page, sent as a result after the cell.
  open_device <- function(...) {
    state$plot_seq <- state$plot_seq + 1
    path <- file.path(state$plot_dir, sprintf("plot-%06.0f-%%03d.png", state$plot_seq))
    type <- if (isTRUE(capabilities("cairo"))) "cairo" else "Xlib"
    grDevices::png(path, width = 7, height = 5, units = "in", res = 96, type = type)
    state$devices <- c(state$devices, grDevices::dev.cur())
    invisible(NULL)
  }

  flush_plots <- function(show) {
    for (device in intersect(state$devices, grDevices::dev.list())) {
      try(grDevices::dev.off(device), silent = TRUE)
    }
    state$devices <- integer()
    for (path in sort(list.files(state$plot_dir, pattern = "[.]png$", full.names = TRUE))) {
      if (show) {
        bytes <- readBin(path, "raw", file.info(path)$size)
        send(list(t = "result", text = "<Figure>", png = base64(bytes), is_main_result = FALSE))
      }
      unlink(path)
    }
  }

  # --- evaluation ------------------------------------------------------------------------------

  error_text <- function(condition) {
    call <- conditionCall(condition)
    if (identical(call, EVAL_CALL)) call <- NULL
    message <- conditionMessage(condition)
    if (is.null(call)) return(paste0("Error: ", message, "\n"))
    paste0("Error in ", paste(deparse(call, nlines = 1L), collapse = ""), ": ", message, "\n")
  }

  # The user's frames: after the driver's eval() call, without the handler frames at the end.
  user_calls <- function(calls) {
    start <- 0L
    for (i in seq_along(calls)) if (identical(calls[[i]], EVAL_CALL)) start <- i
    end <- length(calls) - 1L # the calling handler itself
    while (end > start && identical(calls[[end]][[1L]], as.name(".handleSimpleError"))) end <- end - 1L
    if (end <= start) return(list())
    calls[(start + 1L):end]
  }

  send_error <- function(condition, calls) {
    text <- error_text(condition)
    frames <- vapply(seq_along(calls), function(i) {
      paste0(i, ". ", paste(deparse(calls[[i]], nlines = 1L), collapse = ""))
    }, "")
    traceback <- paste(c(paste0(text, "Traceback:\n"), frames), collapse = "\n")
    send(list(t = "error", name = "ERROR", value = text, traceback = traceback))
  }

  warn <- function(condition) {
    call <- conditionCall(condition)
    where <- if (is.null(call) || identical(call, EVAL_CALL)) "" else {
      paste0("In ", paste(deparse(call, nlines = 1L), collapse = ""), ": ")
    }
    cat(paste0("Warning message:\n", where, conditionMessage(condition), "\n"), file = stderr())
  }

  # Runs one top-level expression; the last one's visible value is the main result, earlier
  # visible values are further results (R's console prints each of them).
  run_expression <- function(expr, last) {
    calls <- NULL
    outcome <- tryCatch(
      withCallingHandlers(
        {
          shown <- withVisible(eval(expr, envir = .GlobalEnv))
          if (shown$visible) {
            text <- paste(utils::capture.output(print(shown$value)), collapse = "\n")
            send(list(t = "result", text = fit_field(text), is_main_result = last))
          }
          TRUE
        },
        error = function(condition) calls <<- sys.calls(),
        warning = function(condition) {
          warn(condition)
          invokeRestart("muffleWarning")
        }
      ),
      error = function(condition) condition
    )
    if (isTRUE(outcome)) return(TRUE)
    send_error(outcome, user_calls(if (is.null(calls)) list() else calls))
    FALSE
  }

  run_cell <- function(code, number) {
    exprs <- tryCatch(
      parse(text = code, srcfile = NULL, keep.source = FALSE),
      error = function(condition) condition
    )
    if (inherits(exprs, "error")) {
      # Without a srcfile the message starts "LINE:COLUMN: "; name the cell as Python does.
      text <- paste0("Error: <cell-", format(number, scientific = FALSE), ">:", conditionMessage(exprs), "\n")
      send(list(t = "error", name = "ERROR", value = text, traceback = text))
      return(invisible())
    }
    total <- length(exprs)
    for (i in seq_len(total)) {
      if (!run_expression(exprs[[i]], i == total)) break
    }
    flush_plots(TRUE)
  }

  set_env <- function(env) {
    if (!length(env)) return(list())
    keys <- names(env)
    saved <- as.list(Sys.getenv(keys, unset = NA, names = TRUE))
    do.call(Sys.setenv, lapply(env, as.character))
    saved
  }

  restore_env <- function(saved) {
    for (key in names(saved)) {
      old <- saved[[key]]
      if (is.na(old)) Sys.unsetenv(key) else do.call(Sys.setenv, stats::setNames(list(old), key))
    }
  }

  handle <- function(command) {
    op <- command$op
    if (identical(op, "ping")) return(send(list(t = "pong")))
    if (!identical(op, "execute")) return(send(list(t = "done", bad_command = paste(op, collapse = ""))))
    if (length(command$base_env)) do.call(Sys.setenv, lapply(command$base_env, as.character))
    state$count <- state$count + 1
    send(list(t = "count", n = state$count))
    saved <- set_env(command$env)
    tryCatch(
      allowInterrupts(run_cell(paste(command$code, collapse = ""), state$count)),
      interrupt = function(condition) {
        flush_plots(FALSE)
        send(list(t = "error", name = "Interrupted", value = "Execution interrupted", traceback = ""))
      },
      error = function(condition) { # a fault of this driver, not of the cell
        text <- conditionMessage(condition)
        send(list(t = "error", name = "InternalError", value = text, traceback = text))
      }
    )
    restore_env(saved)
    send(list(t = "done"))
  }

  # A SIGINT that lands between cells stays pending while interrupts are suspended; this
  # delivers it where it harms nothing (Sys.sleep checks for interrupts).
  absorb_interrupt <- function() tryCatch(Sys.sleep(0), interrupt = function(condition) NULL)

  main <- function() {
    args <- commandArgs(trailingOnly = TRUE)
    event_fd <- as.integer(args[[1L]])
    state$token <- if (length(args) > 1L) args[[2L]] else ""
    if (!isTRUE(l10n_info()[["UTF-8"]])) invisible(Sys.setlocale("LC_CTYPE", "C.UTF-8"))
    options(warn = 1, device = open_device)
    state$plot_dir <- tempfile("sandboxd-plots-")
    dir.create(state$plot_dir)
    state$events <- file(sprintf("/dev/fd/%d", event_fd), open = "wb")
    input <- file("stdin", open = "rb")
    send(list(t = "ready", pid = Sys.getpid(), cwd = getwd(), r = R.version$version.string))
    repeat {
      command <- NULL
      eof <- FALSE
      tryCatch(
        suspendInterrupts({
          command <- tryCatch(read_command(input), error = function(condition) condition)
          eof <- is.null(command)
        }),
        interrupt = function(condition) NULL
      )
      absorb_interrupt()
      if (eof) break
      if (inherits(command, "error")) {
        send(list(t = "done", bad_command = conditionMessage(command)))
        next
      }
      suspendInterrupts(handle(command))
      absorb_interrupt()
    }
    close(state$events)
  }

  main()
}, envir = new.env(parent = baseenv()))
