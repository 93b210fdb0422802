//! Opening a log: recovery from the recovery point (scan, truncate a torn or corrupt
//! tail, rebuild indexes), or a trusted open after a clean shutdown; interrupted
//! compaction swaps are finished first.

use super::*;

impl<S: Storage> Log<S> {
    /// Opens the log in `dir`, creating it if needed, and recovers it (see the module
    /// docs for the policy).
    ///
    /// # Errors
    /// `Corruption` for invalid data below the recovery point, `Io` when the disk
    /// fails, `InvalidConfig` for a bad config.
    pub async fn open(
        ctx: LogContext<S>,
        dir: PathBuf,
        partition: TopicPartition,
        key: LogKey,
        config: LogConfig,
    ) -> Result<Rc<Log<S>>> {
        config.validate()?;
        let storage = &ctx.storage;
        let listed = match storage.list_dir(&dir).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            listed => Some(listed.map_err(|e| Error::io("list", &dir, e))?),
        };
        let created = listed.is_none();
        if created {
            storage.create_dir_all(&dir).await.map_err(|e| Error::io("create", &dir, e))?;
        }
        // Whether entries of the directory changed and must be synced before the log
        // is used: a record flushed into a segment is durable only once the segment's
        // name is.
        let mut dir_changed = match &listed {
            Some(names) => finish_interrupted_swaps(storage, &dir, names).await?,
            None => false,
        };
        // Listed once, again only when a finished swap changed the directory.
        let names = match listed {
            Some(names) if !dir_changed => names,
            _ => storage.list_dir(&dir).await.map_err(|e| Error::io("list", &dir, e))?,
        };
        let mut bases: Vec<Offset> =
            names.iter().filter_map(|n| segment::parse_file_name(n, segment::LOG_SUFFIX)).collect();
        bases.sort();

        let checkpoint_bytes = io::read_whole(storage, &dir.join(CHECKPOINT_FILE))
            .await
            .map_err(|e| Error::io("read", dir.join(CHECKPOINT_FILE), e))?;
        let checkpoint = checkpoint_bytes.as_deref().and_then(Checkpoint::decode);
        let epoch_bytes = io::read_whole(storage, &dir.join(LEADER_EPOCH_FILE))
            .await
            .map_err(|e| Error::io("read", dir.join(LEADER_EPOCH_FILE), e))?;
        let mut epochs = epoch_bytes.as_deref().and_then(LeaderEpochCache::decode).unwrap_or_default();
        // What the files hold now, so that the writes at the end of the open are skipped
        // when they would change nothing (each write is two fsyncs); a damaged one is
        // rewritten. A small log keeps neither (`LogState::keeps_state_files`).
        let checkpoint_on_disk = match (&checkpoint_bytes, checkpoint) {
            (None, _) => OnDisk::Absent,
            (Some(_), Some(checkpoint)) => OnDisk::Written(checkpoint),
            (Some(_), None) => OnDisk::Unknown,
        };
        let epochs_on_disk = match epoch_bytes.as_deref().map(LeaderEpochCache::decode) {
            None => OnDisk::Absent,
            Some(Some(on_disk)) => OnDisk::Written(on_disk),
            Some(None) => OnDisk::Unknown,
        };
        // A log without a checkpoint file after a clean stop of the node is a small one
        // (`keeps_state_files`) that was closed, flushed, with the rest.
        let clean = match (&checkpoint_bytes, checkpoint) {
            (None, _) => ctx.clean_start,
            (Some(_), checkpoint) => checkpoint.is_some_and(|c| c.clean_shutdown),
        };
        // A run that did not shut down cleanly may have left entries it never synced (a
        // segment created by a roll, or by an open that crashed), which recovery is about
        // to trust. A clean close ends with a checkpoint written and its directory synced.
        dir_changed |= !clean;
        let recovery_point = checkpoint.map_or(Offset::ZERO, |c| c.recovery_point);
        let mut log_start_offset = checkpoint.map_or(Offset::ZERO, |c| c.log_start_offset);
        // Scans start at the segment holding the recovery point.
        let scan_from = bases.iter().copied().rfind(|&b| b <= recovery_point).unwrap_or(Offset::ZERO);

        let started = std::time::Instant::now();
        let mut segments = BTreeMap::new();
        let mut truncated_at = None;
        for (i, &base) in bases.iter().enumerate() {
            let path = segment::file_path(&dir, base, segment::LOG_SUFFIX);
            if truncated_at.is_some() {
                // Everything after a truncation point is gone, as Kafka's recovery does.
                remove_segment_files(storage, &dir, base).await?;
                dir_changed = true;
                continue;
            }
            let file = storage.open_file(&path, false).await.map_err(|e| Error::io("open", &path, e))?;
            let file_len = file.size().await.map_err(|e| Error::io("stat", &path, e))?;
            let mut seg = Segment::new(base, file.clone());
            let trusted = clean || base < scan_from;
            if trusted && load_indexes(storage, &dir, &mut seg, file_len).await? {
                // Indexes loaded; the tail after the last entry is checked below.
                let (_, position) = seg.offset_index.last().expect("load_indexes wants entries");
                let tail = segment::scan(&file, position as u64, base, file_len)
                    .await
                    .map_err(|e| Error::io("read", &path, e))?;
                EngineMetrics::add(&ctx.metrics.recovery_scanned_bytes, tail.valid_bytes - position as u64);
                let first_ok = tail.batches.first().is_some_and(|m| {
                    Some(m.last_offset) == seg.offset_index.last().map(|(rel, _)| base.plus(rel as i64))
                });
                if tail.stopped.is_none() && first_ok {
                    seg.resume(&tail.batches);
                    for (epoch, start) in tail.epochs {
                        epochs.assign(epoch, start);
                    }
                    segments.insert(base, seg);
                    continue;
                }
                seg = Segment::new(base, file.clone());
            }
            // Full scan: rebuild indexes, and for untrusted segments find the valid end.
            let scan = segment::scan(&file, 0, base, file_len).await.map_err(|e| Error::io("read", &path, e))?;
            EngineMetrics::add(&ctx.metrics.recovery_scanned_bytes, scan.valid_bytes);
            for meta in &scan.batches {
                seg.record(*meta, &config);
            }
            seg.indexes_dirty = true;
            for (epoch, start) in &scan.epochs {
                epochs.assign(*epoch, *start);
            }
            if let Some((position, reason)) = scan.stopped {
                let is_last = i + 1 == bases.len();
                let below_recovery_point = seg.next_offset < recovery_point;
                // Trailing zeros of the active segment's reservation are not damage, nor
                // those of a rolled segment whose seal (`roll.rs`) had not trimmed it yet
                // when the next segment starts where its batches end.
                // No batch is missing from such a segment, whatever the recovery point says.
                let continued = bases.get(i + 1) == Some(&seg.next_offset);
                let zeros = (is_last || continued) && is_zero_tail(&file, position, file_len).await;
                if (trusted || below_recovery_point) && !(zeros && continued) {
                    ctx.metrics.corruptions.set(ctx.metrics.corruptions.get() + 1);
                    return Err(Error::Corruption { path, position, reason });
                }
                if zeros && !is_last {
                    tracing::info!(target: "skein::engine", partition = %partition, base_offset = base.0, position,
                        bytes = file_len - position, "recovery trimmed a rolled segment's unused reservation");
                } else if zeros {
                    // Unused reservation, or records written without a flush (acknowledged
                    // unless `flush.messages` asked for one) that read back as zeros after
                    // a power loss: on disk the two look the same, so every zero tail an
                    // unclean open cuts is counted and logged, an upper bound of the loss.
                    let zero_bytes = file_len - position;
                    EngineMetrics::add(&ctx.metrics.recovery_zero_tails, 1);
                    EngineMetrics::add(&ctx.metrics.recovery_zero_tail_bytes, zero_bytes);
                    tracing::warn!(target: "skein::engine", partition = %partition, offset = seg.next_offset.0, position,
                        bytes = zero_bytes, "recovery cut a zero tail: unflushed records past this offset, if any, are lost");
                } else {
                    tracing::warn!(target: "skein::engine", partition = %partition, position, reason, "recovery truncated a torn or corrupt tail");
                    let truncated = file_len - position;
                    ctx.metrics.recovery_truncated_bytes.set(ctx.metrics.recovery_truncated_bytes.get() + truncated);
                    truncated_at = Some(seg.next_offset);
                }
                file.truncate(position).await.map_err(|e| Error::io("truncate", &path, e))?;
                file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
            } else if !trusted && i + 1 == bases.len() {
                file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
            }
            segments.insert(base, seg);
        }
        // A DeleteRecords acknowledged past what survived (records written but never
        // flushed, lost to a power cut): as Kafka's recovery, start empty at the
        // acknowledged log start, so that no offset below it is handed out again.
        let survived_end = segments.values().next_back().map(|s| s.next_offset);
        if let Some(end) = survived_end.filter(|&end| end < log_start_offset) {
            tracing::warn!(target: "skein::engine", partition = %partition, log_end_offset = end.0,
                log_start_offset = log_start_offset.0, "log end below the log start: restarting empty at the log start");
            for &base in segments.keys() {
                remove_segment_files(storage, &dir, base).await?;
            }
            segments.clear();
            epochs = LeaderEpochCache::default();
        }
        if segments.is_empty() {
            let base = log_start_offset;
            let path = segment::file_path(&dir, base, segment::LOG_SUFFIX);
            let file = storage.open_file(&path, true).await.map_err(|e| Error::io("create", &path, e))?;
            segments.insert(base, Segment::new(base, file));
            dir_changed = true;
        }
        if dir_changed {
            storage.sync_dir(&dir).await.map_err(|e| Error::io("sync", &dir, e))?;
        }
        // The directory's own name is durable once the data directory (which must itself
        // exist durably) is synced: needed for a new directory, and for one a crashed run
        // may have created without that sync. Without it a power cut loses the partition
        // with every record flushed into it. Partitions opened together share the syncs
        // (`DirSyncs`): 10,000 recovering at once need a handful.
        if created || !clean {
            let parent = dir.parent().unwrap_or(Path::new("."));
            ctx.dir_syncs.sync(storage, parent).await.map_err(|e| Error::io("sync", parent, e))?;
        }
        let active = segments.values().next_back().expect("at least one segment");
        let log_end_offset = active.next_offset;
        let first_base = *segments.keys().next().expect("at least one segment");
        log_start_offset = log_start_offset.max(first_base).min(log_end_offset);
        epochs.truncate_from(log_end_offset);
        // Snapshots of producer state past the recovered end describe lost batches.
        super::snapshots::remove_snapshots(storage, &dir, |o| o > log_end_offset).await?;
        let active_file = active.file.clone();
        let end = active.size;
        let tail_start = align_down(end);
        let tail = active_file
            .read_at(tail_start, (end - tail_start) as usize)
            .await
            .map_err(|e| Error::io("read", segment::file_path(&dir, active.base_offset, segment::LOG_SUFFIX), e))?;
        if tail.len() as u64 != end - tail_start {
            return Err(Error::Corruption {
                path: segment::file_path(&dir, active.base_offset, segment::LOG_SUFFIX),
                position: tail_start,
                reason: "short read of the tail block".into(),
            });
        }
        let reserved = active_file.size().await.map_err(|e| Error::io("stat", &dir, e))?;
        let appender = crate::appender::Appender::new(&active_file, ctx.write_shape, end, &tail, reserved);
        tracing::info!(target: "skein::engine", partition = %partition, log_start_offset = log_start_offset.0,
            log_end_offset = log_end_offset.0, segments = segments.len(), clean, recovery_ms = started.elapsed().as_millis() as u64, "log opened");

        let opened =
            Opened { segments, appender, log_start_offset, log_end_offset, epochs, checkpoint_on_disk, epochs_on_disk };
        let log = Log::assemble(ctx, dir, partition, key, config, opened);
        // From here on a crash is not a clean shutdown.
        log.write_checkpoint(false).await?;
        log.write_epochs().await?;
        if log.config().cleanup_policy.compact {
            // Read now, so it is clamped to the recovered end before anything is appended.
            log.load_cleaner_checkpoint().await;
        }
        Ok(log)
    }
}

/// What opening or creating a log found: the state a `Log` starts from.
struct Opened<F: StorageFile> {
    segments: BTreeMap<Offset, Segment<F>>,
    appender: crate::appender::Appender<F>,
    log_start_offset: Offset,
    log_end_offset: Offset,
    epochs: LeaderEpochCache,
    checkpoint_on_disk: OnDisk<Checkpoint>,
    epochs_on_disk: OnDisk<LeaderEpochCache>,
}

impl<S: Storage> Log<S> {
    /// Creates the log of a partition whose directory does not exist yet: the
    /// directory, the `identity` files the owner keeps in it (Kafka's
    /// `partition.metadata`, written in place and synced: no temp file or rename is
    /// needed in a directory nobody reads yet), the first segment, one sync of the
    /// directory and one of the data directory shared with the partitions created with
    /// it (`DirSyncs`). No read and no listing: creating 10,000 partitions is a few
    /// operations each.
    ///
    /// # Errors
    /// `PartitionExists` when the directory exists (open it instead); `Io` when the
    /// disk fails; `InvalidConfig` for a bad config.
    pub async fn create(
        ctx: LogContext<S>,
        dir: PathBuf,
        partition: TopicPartition,
        key: LogKey,
        config: LogConfig,
        identity: &[(&str, &[u8])],
    ) -> Result<Rc<Log<S>>> {
        config.validate()?;
        let storage = &ctx.storage;
        let parent = dir.parent().unwrap_or(Path::new("."));
        let created = match storage.create_dir(&dir).await {
            // A data directory that does not exist yet is made first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                storage.create_dir_all(parent).await.map_err(|e| Error::io("create", parent, e))?;
                storage.create_dir(&dir).await
            }
            created => created,
        };
        if !created.map_err(|e| Error::io("create", &dir, e))? {
            return Err(Error::PartitionExists(partition));
        }
        for (name, bytes) in identity {
            let path = dir.join(name);
            io::write_in_place(storage, &path, bytes, true).await.map_err(|e| Error::io("write", &path, e))?;
        }
        let path = segment::file_path(&dir, Offset::ZERO, segment::LOG_SUFFIX);
        let file = storage.open_file(&path, true).await.map_err(|e| Error::io("create", &path, e))?;
        storage.sync_dir(&dir).await.map_err(|e| Error::io("sync", &dir, e))?;
        ctx.dir_syncs.sync(storage, parent).await.map_err(|e| Error::io("sync", parent, e))?;
        tracing::debug!(target: "skein::engine", partition = %partition, "log created");
        let appender = crate::appender::Appender::new(&file, ctx.write_shape, 0, &[], 0);
        let opened = Opened {
            segments: BTreeMap::from([(Offset::ZERO, Segment::new(Offset::ZERO, file))]),
            appender,
            log_start_offset: Offset::ZERO,
            log_end_offset: Offset::ZERO,
            epochs: LeaderEpochCache::default(),
            checkpoint_on_disk: OnDisk::Absent,
            epochs_on_disk: OnDisk::Absent,
        };
        Ok(Log::assemble(ctx, dir, partition, key, config, opened))
    }

    /// A log from what opening or creating it found.
    fn assemble(
        ctx: LogContext<S>,
        dir: PathBuf,
        partition: TopicPartition,
        key: LogKey,
        config: LogConfig,
        opened: Opened<S::File>,
    ) -> Rc<Log<S>> {
        let Opened { segments, appender, log_start_offset, log_end_offset, epochs, checkpoint_on_disk, epochs_on_disk } =
            opened;
        Rc::new_cyclic(|me| Log {
            me: me.clone(),
            partition,
            dir,
            key,
            ctx,
            state: RefCell::new(LogState {
                config,
                segments,
                appender,
                pending: VecDeque::new(),
                log_start_offset,
                log_end_offset,
                offset_written_end: log_end_offset,
                offset_flushed_end: log_end_offset,
                recovery_point: log_end_offset,
                unflushed_records: 0,
                last_flush_ms: now_ms(),
                sync_in_flight: false,
                reservation: Default::default(),
                last_append: None,
                seals: VecDeque::new(),
                epochs,
                failed: None,
                closed: false,
                coalescing: Default::default(),
                charged: 0,
            }),
            gate: Gate::default(),
            written_waiters: Waiters::default(),
            sync_waiters: Waiters::default(),
            readers: Waiters::default(),
            stamp: crate::Stamp::new(),
            seal_waiters: Waiters::default(),
            seal_hurry: Cell::new(false),
            seal_urgent: Waiters::default(),
            read_ahead: Rc::default(),
            maintenance: async_lock::Mutex::new(()),
            written_checkpoint: Cell::new(checkpoint_on_disk),
            written_epochs: RefCell::new(epochs_on_disk),
            first_dirty: Cell::new(None),
            state_files_due: Cell::new(None),
            oldest_tombstone: Cell::new(None),
            transactions: RefCell::new(None),
            fenced: RefCell::new(BTreeMap::new()),
        })
    }
}

/// Recomputes a segment's size, next offset and max timestamp up to `limit`, from its
/// (already truncated) indexes and a scan of the bytes after the last index entry.
pub(super) async fn restore_bookkeeping<F: StorageFile>(
    seg: &mut Segment<F>,
    limit: u64,
    config: &LogConfig,
) -> std::io::Result<()> {
    match seg.offset_index.last() {
        Some((_, position)) => {
            let tail = segment::scan(&seg.file, position as u64, seg.base_offset, limit).await?;
            seg.resume(&tail.batches);
        }
        None => {
            let scan = segment::scan(&seg.file, 0, seg.base_offset, limit).await?;
            seg.time_index = TimeIndex::default();
            for meta in &scan.batches {
                seg.record(*meta, config);
            }
        }
    }
    Ok(())
}

/// Loads a segment's index files. Returns false when either is missing, damaged or
/// empty, so the caller rebuilds them from the log.
pub(super) async fn load_indexes<S: Storage, F: StorageFile>(
    storage: &S,
    dir: &Path,
    seg: &mut Segment<F>,
    log_bytes: u64,
) -> Result<bool> {
    let index_path = segment::file_path(dir, seg.base_offset, segment::INDEX_SUFFIX);
    let time_path = segment::file_path(dir, seg.base_offset, segment::TIME_INDEX_SUFFIX);
    let read =
        |path: PathBuf| async move { io::read_whole(storage, &path).await.map_err(|e| Error::io("read", &path, e)) };
    let (Some(index), Some(times)) = (read(index_path).await?, read(time_path).await?) else { return Ok(false) };
    if index.len() > crate::limits::INDEX_BYTES_MAX || times.len() > crate::limits::INDEX_BYTES_MAX {
        return Ok(false);
    }
    match (OffsetIndex::decode(&index, log_bytes), TimeIndex::decode(&times)) {
        (Ok(index), Ok(times)) if !index.is_empty() => {
            seg.offset_index = index;
            seg.time_index = times;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Whether the file holds only zeros from `position` to `len` (unused reservation).
pub(super) async fn is_zero_tail<F: StorageFile>(file: &F, position: u64, len: u64) -> bool {
    let mut at = position;
    while at < len {
        let want = (len - at).min(1 << 20) as usize;
        match file.read_at(at, want).await {
            Ok(bytes) if !bytes.is_empty() => {
                if bytes.iter().any(|&b| b != 0) {
                    return false;
                }
                at += bytes.len() as u64;
            }
            _ => return false,
        }
    }
    true
}

/// Completes compaction swaps a crash interrupted and removes unfinished temp files:
/// a `.log.swap` is a complete compacted segment, a `.log.cleaned` or `.tmp` is not.
/// Returns whether it changed the directory; the caller syncs it.
pub(super) async fn finish_interrupted_swaps<S: Storage>(storage: &S, dir: &Path, names: &[String]) -> Result<bool> {
    let mut changed = false;
    for name in names {
        let path = dir.join(name);
        if let Some(base) = segment::parse_file_name(name, segment::SWAP_SUFFIX) {
            let target = segment::file_path(dir, base, segment::LOG_SUFFIX);
            storage.rename(&path, &target).await.map_err(|e| Error::io("rename", &path, e))?;
            // Its indexes describe the old content.
            for suffix in [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX] {
                let _ = storage.remove_file(&segment::file_path(dir, base, suffix)).await;
            }
        } else if name.ends_with(segment::CLEANED_SUFFIX) || name.ends_with(".tmp") {
            storage.remove_file(&path).await.map_err(|e| Error::io("remove", &path, e))?;
        } else {
            continue;
        }
        changed = true;
    }
    Ok(changed)
}
