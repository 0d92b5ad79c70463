"""The names of Spark 4.3's settings outside ``spark.sql.*`` (core, deploy, Kubernetes, YARN,
Hive, Connect, streaming), for checking a config file's ``Spark:`` section without a JVM.

:data:`SPARK_CORE_SETTINGS` is every such key the running Spark registers as a setting
(``ConfigEntry.knownConfigs`` once the holders of settings are loaded, internal ones and the
old names Spark still reads included); :mod:`sqe.config.spark_sql_settings` holds the
``spark.sql.*`` ones.  ``tests/config/test_spark_settings.py`` holds both equal to the
running Spark's.
"""

from __future__ import annotations

__all__ = ["SPARK_CORE_SETTINGS"]

SPARK_CORE_SETTINGS: frozenset[str] = frozenset("spark." + name for name in """
acls.enable admin.acls admin.acls.groups api.mode app.attempt.id appStateStore.asyncTracking.enable archives
authenticate authenticate.enableSaslEncryption authenticate.secret authenticate.secret.driver.file
authenticate.secret.executor.file authenticate.secret.file authenticate.secretBitLength barrier.sync.timeout
block.failures.beforeLocationRefresh blockManager.port broadcast.UDFCompressionThreshold broadcast.blockSize
broadcast.checksum broadcast.compress buffer.pageSize buffer.size buffer.write.chunkSize checkpoint.compress
checkpoint.dir checkpoint.local.verifyChecksum.enabled checkpoint.local.verifyChecksum.forceSerialized
cleaner.periodicGC.interval cleaner.referenceTracking cleaner.referenceTracking.blocking
cleaner.referenceTracking.blocking.shuffle cleaner.referenceTracking.blocking.timeout
cleaner.referenceTracking.cleanCheckpoints connect.authenticate.token
connect.execute.manager.abandonedTombstonesSize connect.execute.manager.detachedTimeout
connect.execute.manager.maintenanceInterval connect.execute.reattachable.enabled
connect.execute.reattachable.observerRetryBufferSize connect.execute.reattachable.senderMaxStreamDuration
connect.execute.reattachable.senderMaxStreamSize connect.extensions.command.classes
connect.extensions.expression.classes connect.extensions.getStatus.classes
connect.extensions.relation.classes connect.grpc.arrow.maxBatchSize connect.grpc.binding.address
connect.grpc.binding.port connect.grpc.interceptor.classes connect.grpc.keepAlive.enabled
connect.grpc.keepAlive.time connect.grpc.keepAlive.timeout connect.grpc.marshallerRecursionLimit
connect.grpc.maxInboundMessageSize connect.grpc.maxMetadataSize connect.grpc.port.maxRetries
connect.jvmStacktrace.maxSize connect.maxPlanSize connect.ml.backend.classes connect.progress.reportInterval
connect.scalaUdf.stubPrefixes connect.session.connectML.mlCache.memoryControl.enabled
connect.session.connectML.mlCache.memoryControl.maxInMemorySize
connect.session.connectML.mlCache.memoryControl.maxModelSize
connect.session.connectML.mlCache.memoryControl.maxStorageSize
connect.session.connectML.mlCache.memoryControl.offloadingTimeout
connect.session.inactiveOperations.cacheExpiration connect.session.manager.closedSessionsTombstonesSize
connect.session.manager.defaultSessionTimeout connect.session.manager.maintenanceInterval
connect.session.planCache.alwaysCacheDataSourceReadsEnabled connect.session.planCache.enabled
connect.session.planCache.maxSize connect.session.planCompression.defaultAlgorithm
connect.session.planCompression.threshold connect.session.resultChunking.maxChunkSize cores.max
dead.worker.persistence decommission.enabled default.parallelism deploy.appIdPattern deploy.appNumberModulo
deploy.defaultCores deploy.driverIdPattern deploy.maxDrivers deploy.maxExecutorRetries
deploy.recoveryCompressionCodec deploy.recoveryDirectory deploy.recoveryMode deploy.recoveryMode.factory
deploy.recoverySerializationFilter deploy.recoveryTimeout deploy.retainedApplications deploy.retainedDrivers
deploy.spreadOut deploy.spreadOutApps deploy.spreadOutDrivers deploy.workerSelectionPolicy
deploy.zookeeper.dir deploy.zookeeper.url diskStore.subDirectories driver.appUIAddress driver.bindAddress
driver.blockManager.port driver.cores driver.defaultExtraClassPath driver.extraClassPath
driver.extraJavaOptions driver.extraLibraryPath driver.host driver.limitActiveProcessorCount.enabled
driver.log.allowErasureCoding driver.log.dfsDir driver.log.layout driver.log.localDir
driver.log.persistToDfs.enabled driver.log.redirectConsoleOutputs driver.maxResultSize driver.memory
driver.memoryOverhead driver.memoryOverheadFactor driver.metrics.pollingInterval driver.minMemoryOverhead
driver.port driver.resourcesFile driver.supervise driver.timeout driver.userClassPathFirst
dynamicAllocation.cachedExecutorIdleTimeout dynamicAllocation.enabled
dynamicAllocation.executorAllocationRatio dynamicAllocation.executorIdleTimeout
dynamicAllocation.initialExecutors dynamicAllocation.maxExecutors dynamicAllocation.minExecutors
dynamicAllocation.schedulerBacklogTimeout dynamicAllocation.shuffleTracking.enabled
dynamicAllocation.shuffleTracking.timeout dynamicAllocation.sustainedSchedulerBacklogTimeout
dynamicAllocation.testing eventLog.buffer.kb eventLog.compress eventLog.compression.codec eventLog.dir
eventLog.enabled eventLog.erasureCoding.enabled eventLog.excludedPatterns
eventLog.gcMetrics.oldGenerationGarbageCollectors eventLog.gcMetrics.youngGenerationGarbageCollectors
eventLog.includeTaskMetricsAccumulators eventLog.logBlockUpdates.enabled eventLog.logStageExecutorMetrics
eventLog.longForm.enabled eventLog.overwrite eventLog.rolling.enabled eventLog.rolling.maxFileSize
eventLog.testing excludeOnFailure.application.enabled excludeOnFailure.application.fetchFailure.enabled
excludeOnFailure.application.maxFailedExecutorsPerNode
excludeOnFailure.application.maxFailedTasksPerExecutor excludeOnFailure.enabled
excludeOnFailure.killExcludedExecutors excludeOnFailure.killExcludedExecutors.decommission
excludeOnFailure.stage.maxFailedExecutorsPerNode excludeOnFailure.stage.maxFailedTasksPerExecutor
excludeOnFailure.task.maxTaskAttemptsPerExecutor excludeOnFailure.task.maxTaskAttemptsPerNode
excludeOnFailure.taskAndStage.enabled excludeOnFailure.timeout executor.allowSparkContext executor.cores
executor.decommission.forceKillTimeout executor.decommission.killInterval executor.decommission.signal
executor.defaultExtraClassPath executor.extraClassPath executor.extraJavaOptions executor.extraLibraryPath
executor.failuresValidityInterval executor.heartbeat.dropZeroAccumulatorUpdates
executor.heartbeat.maxFailures executor.heartbeatInterval executor.id executor.instances
executor.isolatedSessionCache.size executor.killOnFatalError.depth
executor.limitActiveProcessorCount.enabled executor.logs.redirectConsoleOutputs
executor.logs.rolling.enableCompression executor.logs.rolling.maxRetainedFiles executor.logs.rolling.maxSize
executor.logs.rolling.size.maxBytes executor.logs.rolling.strategy executor.logs.rolling.time.interval
executor.maxNumFailures executor.memory executor.memoryOverhead executor.memoryOverheadFactor
executor.metrics.fileSystemSchemes executor.metrics.pollingInterval executor.minMemoryOverhead
executor.processTreeMetrics.enabled executor.pyspark.memory executor.python.worker.log.details
executor.syncLogLevel.enabled executor.userClassPathFirst extraListeners file.transferTo files
files.fetchFailure.unRegisterOutputOnHost files.ignoreCorruptFiles files.ignoreMissingFiles
files.maxPartitionBytes files.openCostInBytes files.userClassPathFirst hadoopRDD.ignoreEmptySplits
history.custom.executor.log.url history.custom.executor.log.url.applyIncompleteApplication
history.fs.cleaner.enabled history.fs.cleaner.interval history.fs.cleaner.interval.seconds
history.fs.cleaner.maxAge history.fs.cleaner.maxAge.seconds history.fs.cleaner.maxNum
history.fs.driverlog.cleaner.enabled history.fs.driverlog.cleaner.interval
history.fs.driverlog.cleaner.maxAge history.fs.endEventReparseChunkSize history.fs.eventLog.maxLineLength
history.fs.eventLog.onDemandLoadEnabled history.fs.eventLog.rolling.compaction.score.threshold
history.fs.eventLog.rolling.maxFilesToRetain history.fs.eventLog.rolling.onDemandLoadEnabled
history.fs.inProgressOptimization.enabled history.fs.logDirectory history.fs.logDirectory.names
history.fs.numCompactThreads history.fs.numReplayThreads history.fs.safemodeCheck.interval
history.fs.update.batchSize history.fs.update.interval history.fs.update.interval.seconds
history.fs.update.scanDisabledPathPatterns history.fs.updateInterval history.kerberos.enabled
history.kerberos.keytab history.kerberos.principal history.provider history.retainedApplications
history.store.hybridStore.diskBackend history.store.hybridStore.enabled
history.store.hybridStore.maxMemoryUsage history.store.maxDiskUsage history.store.path
history.store.serializer history.ui.acls.enable history.ui.admin.acls history.ui.admin.acls.groups
history.ui.maxApplications history.ui.port history.ui.title history.updateInterval io.compression.codec
io.compression.lz4.block.size io.compression.lz4.blockSize io.compression.lzf.parallel.enabled
io.compression.snappy.block.size io.compression.snappy.blockSize io.compression.zstd.bufferPool.enabled
io.compression.zstd.bufferSize io.compression.zstd.level io.compression.zstd.strategy
io.compression.zstd.workers io.crypto.cipher.transformation io.encryption.enabled io.encryption.keySizeBits
io.encryption.keygen.algorithm io.warning.largeFileThreshold jars jars.excludes jars.ivy jars.ivySettings
jars.packages jars.repositories kerberos.access.hadoopFileSystems kerberos.keytab kerberos.principal
kerberos.relogin.period kerberos.renewal.credentials kryo.classesToRegister kryo.pool kryo.referenceTracking
kryo.registrationRequired kryo.registrator kryo.unsafe kryoserializer.buffer kryoserializer.buffer.max
kryoserializer.buffer.max.mb kryoserializer.buffer.mb kubernetes.allocation.batch.delay
kubernetes.allocation.batch.size kubernetes.allocation.driver.readinessTimeout
kubernetes.allocation.executor.timeout kubernetes.allocation.maxPendingPods
kubernetes.allocation.maxPendingPodsPerRp kubernetes.allocation.maximum kubernetes.allocation.pods.allocator
kubernetes.allocation.recoveryMode.enabled kubernetes.appKillPodDeletionGracePeriod
kubernetes.authenticate.driver.serviceAccountName kubernetes.authenticate.executor.serviceAccountName
kubernetes.configMap.maxSize kubernetes.container.image kubernetes.container.image.pullPolicy
kubernetes.container.image.pullSecrets kubernetes.context kubernetes.decommission.script
kubernetes.driver.annotateExitException kubernetes.driver.connectionTimeout
kubernetes.driver.container.image kubernetes.driver.limit.cores kubernetes.driver.master
kubernetes.driver.ownPersistentVolumeClaim kubernetes.driver.pod.excludedFeatureSteps
kubernetes.driver.pod.featureSteps kubernetes.driver.pod.name kubernetes.driver.podTemplateContainerName
kubernetes.driver.podTemplateFile kubernetes.driver.request.cores kubernetes.driver.requestTimeout
kubernetes.driver.resourceNamePrefix kubernetes.driver.reusePersistentVolumeClaim
kubernetes.driver.scheduler.name kubernetes.driver.securityContext.allowPrivilegeEscalation
kubernetes.driver.service.deleteOnTermination kubernetes.driver.service.ipFamilies
kubernetes.driver.service.ipFamilyPolicy kubernetes.driver.service.publishNotReadyAddresses
kubernetes.driver.waitToReusePersistentVolumeClaim kubernetes.dynamicAllocation.deleteGracePeriod
kubernetes.executor.apiPollingInterval kubernetes.executor.checkAllContainers
kubernetes.executor.container.image kubernetes.executor.decommissionLabel
kubernetes.executor.decommissionLabelValue kubernetes.executor.deleteOnTermination
kubernetes.executor.deletedExecutorsCacheTimeout kubernetes.executor.disableConfigMap
kubernetes.executor.enableApiPolling kubernetes.executor.enableApiWatcher
kubernetes.executor.enablePollingWithResourceVersion kubernetes.executor.eventProcessingInterval
kubernetes.executor.limit.cores kubernetes.executor.minTasksPerExecutorBeforeRolling
kubernetes.executor.missingPodDetectDelta kubernetes.executor.pod.excludedFeatureSteps
kubernetes.executor.pod.featureSteps kubernetes.executor.podDeletionCost kubernetes.executor.podNamePrefix
kubernetes.executor.podTemplateContainerName kubernetes.executor.podTemplateFile
kubernetes.executor.pvc.resizeFactor kubernetes.executor.pvc.resizeInterval
kubernetes.executor.pvc.resizeThreshold kubernetes.executor.request.cores kubernetes.executor.resizeFactor
kubernetes.executor.resizeInterval kubernetes.executor.resizeThreshold kubernetes.executor.rollInterval
kubernetes.executor.rollPolicy kubernetes.executor.scheduler.name
kubernetes.executor.securityContext.allowPrivilegeEscalation
kubernetes.executor.terminationGracePeriodSeconds kubernetes.executor.useDriverPodIP
kubernetes.executorSnapshotsSubscribersShutdownGracePeriod kubernetes.file.upload.path
kubernetes.hadoop.configMapName kubernetes.jars.avoidDownloadSchemes kubernetes.kerberos.krb5.configMapName
kubernetes.kerberos.krb5.path kubernetes.kerberos.tokenSecret.itemKey kubernetes.kerberos.tokenSecret.name
kubernetes.legacy.useReadWriteOnceAccessMode kubernetes.local.dirs.tmpfs kubernetes.memoryOverheadFactor
kubernetes.namespace kubernetes.report.interval kubernetes.resource.type kubernetes.scheduler.name
kubernetes.securityContext.allowPrivilegeEscalation kubernetes.submission.connectionTimeout
kubernetes.submission.requestTimeout kubernetes.submission.waitAppCompletion kubernetes.submitInDriver
kubernetes.trust.certificates locality.wait locality.wait.legacyResetOnTaskLaunch locality.wait.node
locality.wait.process locality.wait.rack log.callerContext log.legacyTaskNameMdc.enabled log.level
log.structuredLogging.enabled master.rest.allowedAppResourcePatterns master.rest.enabled master.rest.filters
master.rest.host master.rest.maxRequestBodySize master.rest.maxThreads master.rest.port
master.rest.virtualThread.enabled master.ui.decommission.allow.mode master.ui.historyServerUrl
master.ui.port master.ui.title master.ui.visibleEnvVarPrefixes master.useAppNameAsAppId.enabled
master.useDriverIdAsAppName.enabled maxRemoteBlockSizeFetchToMem memory.fraction memory.offHeap.enabled
memory.offHeap.size memory.storageFraction memory.unmanagedMemoryPollingInterval
metrics.appStatusSource.enabled metrics.conf metrics.executorMetricsSource.enabled metrics.namespace
metrics.staticSources.enabled modify.acls modify.acls.groups network.crypto.enabled
network.crypto.saslFallback network.maxRemoteBlockSizeFetchToMem network.recreateWorkerGroupOnDeadEventLoop
network.remoteReadNioBufferConversion network.timeout network.timeoutInterval plugins pyspark.driver.python
pyspark.python python.authenticate.socketTimeout python.daemon.killWorkerOnFlushFailure python.daemon.module
python.factory.idleWorkerMaxPoolSize python.sql.dataFrameDebugging.enabled python.task.killTimeout
python.udf.pipelined.enabled python.udf.pipelined.queueDepth python.unix.domain.socket.dir
python.unix.domain.socket.enabled python.use.daemon python.worker.faulthandler.enabled
python.worker.idleTimeoutSeconds python.worker.killOnIdleTimeout python.worker.module python.worker.reuse
python.worker.tracebackDumpIntervalSeconds r.backendConnectionTimeout r.command r.heartBeatInterval
r.numRBackendThreads rdd.cache.visibilityTracking.enabled rdd.checkpoint.cachePreferredLocsExpireTime
rdd.compress rdd.limit.initialNumPartitions rdd.limit.scaleUpFactor rdd.parallelListingThreshold
redaction.regex redaction.string.regex reducer.maxBlocksInFlightPerAddress reducer.maxMbInFlight
reducer.maxReqSizeShuffleToMem reducer.maxReqsInFlight reducer.maxSizeInFlight resources.discoveryPlugin
resources.warnings.testing rpc.askTimeout rpc.connect.threads rpc.io.numConnectionsPerPeer rpc.io.threads
rpc.lookupTimeout rpc.message.maxSize rpc.netty.dispatcher.numThreads scheduler.allocation.file
scheduler.barrier.maxConcurrentTasksCheck.interval scheduler.barrier.maxConcurrentTasksCheck.maxFailures
scheduler.dropTaskInfoAccumulablesOnTaskCompletion.enabled
scheduler.excludeOnFailure.unschedulableTaskSetTimeout scheduler.executorTaskExcludeOnFailureTime
scheduler.listenerbus.eventqueue.capacity scheduler.listenerbus.eventqueue.size
scheduler.listenerbus.exitTimeout scheduler.listenerbus.logSlowEvent
scheduler.listenerbus.logSlowEvent.threshold scheduler.listenerbus.metrics.maxListenerClassesTimed
scheduler.maxRegisteredResourcesWaitingTime scheduler.maxRetainedRemovedDecommissionExecutors
scheduler.maxRetainedUnknownDecommissionExecutors scheduler.minRegisteredResourcesRatio scheduler.mode
scheduler.numCancelledJobGroupsToTrack scheduler.pipelinedGroup.slotCheck.enabled
scheduler.resource.profileMergeConflicts scheduler.revive.interval scheduler.stage.legacyAbortAfterKillTasks
scheduler.streaming.idAwareLogging.enabled scheduler.streaming.idAwareLogging.queryIdLength
security.credentials.renewalRatio security.credentials.retryWait security.directCredentialProviders.enabled
serializer serializer.extraDebugInfo serializer.objectStreamReset shuffle.accurateBlockSkewedFactor
shuffle.accurateBlockThreshold shuffle.checksum.algorithm shuffle.checksum.enabled shuffle.compress
shuffle.detectCorrupt shuffle.detectCorrupt.useExtraMemory shuffle.file.buffer shuffle.file.buffer.kb
shuffle.file.merge.buffer shuffle.localDisk.file.output.buffer shuffle.manager shuffle.manager.incremental
shuffle.mapOutput.dispatcher.numThreads shuffle.mapOutput.minSizeForBroadcast
shuffle.mapOutput.parallelAggregationThreshold shuffle.mapStatus.compression.codec
shuffle.maxAccurateSkewedBlockNumber shuffle.maxAttemptsOnNettyOOM shuffle.minNumPartitionsToHighlyCompress
shuffle.push.enabled shuffle.push.finalize.timeout shuffle.push.maxBlockBatchSize
shuffle.push.maxBlockSizeToPush shuffle.push.maxRetainedMergerLocations shuffle.push.merge.finalizeThreads
shuffle.push.mergersMinStaticThreshold shuffle.push.mergersMinThresholdRatio
shuffle.push.minCompletedPushRatio shuffle.push.minShuffleSizeToWait shuffle.push.numPushThreads
shuffle.push.results.timeout shuffle.push.sendFinalizeRPCThreads shuffle.readHostLocalDisk
shuffle.reduceLocality.enabled shuffle.registration.maxAttempts shuffle.registration.timeout
shuffle.service.db.backend shuffle.service.db.enabled shuffle.service.enabled
shuffle.service.fetch.rdd.enabled shuffle.service.name shuffle.service.port shuffle.service.removeShuffle
shuffle.sort.bypassMergeThreshold shuffle.sort.initialBufferSize shuffle.sort.io.plugin.class
shuffle.sort.useRadixSort shuffle.spill.batchSize shuffle.spill.compress shuffle.spill.diskWriteBufferSize
shuffle.spill.initialMemoryThreshold shuffle.spill.maxSizeInBytesForSpillThreshold
shuffle.spill.numElementsForceSpillThreshold shuffle.streaming.checksum.enabled
shuffle.streaming.networkBufferMaxWaitTimeMs shuffle.streaming.networkBufferSize
shuffle.streaming.readerMaxMemory shuffle.streaming.writerConnectionTimeout
shuffle.streaming.writerMaxMemory shuffle.sync shuffle.unsafe.fastMergeEnabled
shuffle.unsafe.file.output.buffer shuffle.useOldFetchProtocol shutdown.timeout sparkr.r.command speculation
speculation.efficiency.enabled speculation.efficiency.longRunTaskFactor
speculation.efficiency.processRateMultiplier speculation.interval speculation.minTaskRuntime
speculation.multiplier speculation.quantile speculation.task.duration.threshold
stage.ignoreDecommissionFetchFailure stage.maxAttempts stage.maxConsecutiveAttempts
standalone.executorRemoveDelayOnDisconnection standalone.submit.filterEnvironment
standalone.submit.waitAppCompletion storage.blockManagerHeartbeatTimeoutMs
storage.blockManagerMasterDriverHeartbeatTimeoutMs storage.blockManagerSlaveTimeoutMs
storage.blockManagerTimeoutIntervalMs storage.cachedPeersTtl storage.cleanupFilesAfterExecutorExit
storage.decommission.enabled storage.decommission.fallbackStorage.cleanUp
storage.decommission.fallbackStorage.path storage.decommission.maxReplicationFailuresPerBlock
storage.decommission.rddBlocks.enabled storage.decommission.replicationReattemptInterval
storage.decommission.shuffleBlocks.bufferRacingMigrations storage.decommission.shuffleBlocks.enabled
storage.decommission.shuffleBlocks.maxDiskSize storage.decommission.shuffleBlocks.maxThreads
storage.exceptionOnPinLeak storage.localDiskByExecutors.cacheSize storage.maxReplicationFailures
storage.memoryMapLimitForTests storage.memoryMapThreshold storage.rddBlockChecksum.algorithm
storage.rddBlockChecksum.enabled storage.rddBlockChecksum.verifyOnReplication storage.replication.policy
storage.replication.proactive storage.replication.topologyFile storage.replication.topologyMapper
storage.shuffleManager.initWaitingTimeout storage.unrollMemoryCheckPeriod storage.unrollMemoryGrowthFactor
storage.unrollMemoryThreshold streaming.backpressure.enabled streaming.backpressure.initialRate
streaming.backpressure.pid.derived streaming.backpressure.pid.integral streaming.backpressure.pid.minRate
streaming.backpressure.pid.proportional streaming.backpressure.rateEstimator streaming.blockInterval
streaming.concurrentJobs streaming.driver.writeAheadLog.allowBatching
streaming.driver.writeAheadLog.batchingTimeout streaming.driver.writeAheadLog.class
streaming.driver.writeAheadLog.closeFileAfterWrite streaming.driver.writeAheadLog.maxFailures
streaming.driver.writeAheadLog.rollingIntervalSecs streaming.dynamicAllocation.enabled
streaming.dynamicAllocation.maxExecutors streaming.dynamicAllocation.minExecutors
streaming.dynamicAllocation.scalingDownRatio streaming.dynamicAllocation.scalingInterval
streaming.dynamicAllocation.scalingUpRatio streaming.dynamicAllocation.testing streaming.extraListeners
streaming.gracefulStopTimeout streaming.manualClock.jump streaming.minRememberDuration
streaming.raw.maxBlockSizeBytes streaming.receiver.maxRate streaming.receiver.writeAheadLog.class
streaming.receiver.writeAheadLog.closeFileAfterWrite streaming.receiver.writeAheadLog.enable
streaming.receiver.writeAheadLog.maxFailures streaming.receiver.writeAheadLog.rollingIntervalSecs
streaming.sessionByKey.deltaChainThreshold streaming.stopGracefullyOnShutdown streaming.ui.retainedBatches
streaming.unpersist submit.callSystemExitOnMainExit submit.deployMode
submit.proxyUser.allowCustomClasspathInClusterMode submit.pyFiles task.cpus task.maxDirectResultSize
task.maxFailures task.reaper.enabled task.reaper.killTimeout task.reaper.pollingInterval
task.reaper.threadDump taskMetrics.trackUpdatedBlockStatuses test.noStageRetry testing
testing.dynamicAllocation.schedule.enabled testing.injectShuffleFetchFailures
testing.injectShuffleFetchFailuresDownstreamDelay testing.injectShuffleFetchFailuresResultStageDelay
testing.injectShuffleForceChecksumMismatchOnRecompute testing.memory testing.nCoresPerExecutor
testing.nExecutorsPerHost testing.nHosts testing.reservedMemory testing.resourceProfileManager
testing.skipESSRegister testing.skipValidateCores ui.actionsViaGetEnabled ui.allowFramingFrom
ui.consoleProgress.update.interval ui.contentSecurityPolicy.enabled
ui.contentSecurityPolicy.frameAncestors.enabled ui.custom.executor.log.url ui.dagGraph.retainedRootRDDs
ui.enabled ui.filters ui.groupSQLSubExecutionEnabled ui.heapHistogramEnabled ui.jetty.sniHostCheckEnabled
ui.jetty.stopTimeout ui.jettyStopTimeout ui.killEnabled ui.liveUpdate.minFlushPeriod ui.liveUpdate.period
ui.port ui.prometheus.enabled ui.proxyRedirectUri ui.requestHeaderSize ui.retainedDeadExecutors
ui.retainedJobs ui.retainedStages ui.retainedTasks ui.reverseProxy ui.reverseProxyUrl ui.showConsoleProgress
ui.showErrorStacks ui.store.path ui.strictTransportSecurity ui.threadDump.flamegraphEnabled
ui.threadDumpsEnabled ui.timeline.executors.maximum ui.timeline.jobs.maximum ui.timeline.stages.maximum
ui.timeline.tasks.maximum ui.timelineEnabled ui.view.acls ui.view.acls.groups ui.xContentTypeOptions.enabled
ui.xXssProtection unsafe.exceptionOnMemoryLeak unsafe.offHeap unsafe.sorter.spill.merge.factor
unsafe.sorter.spill.read.ahead.enabled unsafe.sorter.spill.reader.buffer.size user.groups.mapping
worker.cleanup.appDataTtl worker.cleanup.enabled worker.cleanup.interval worker.decommission.signal
worker.driverTerminateTimeout worker.executorStateSync.maxAttempts worker.idPattern
worker.initialRegistrationRetries worker.maxRegistrationRetries worker.preferConfiguredMasterAddress
worker.resourcesFile worker.timeout worker.ui.compressedLogFileLengthCacheSize worker.ui.port
worker.ui.retainedDrivers worker.ui.retainedExecutors yarn.access.hadoopFileSystems yarn.access.namenodes
yarn.am.attemptFailuresValidityInterval yarn.am.clientModeExitOnError
yarn.am.clientModeTreatDisconnectAsFailed yarn.am.cores yarn.am.defaultJavaOptions yarn.am.extraJavaOptions
yarn.am.extraLibraryPath yarn.am.finalMessageLimit yarn.am.limitActiveProcessorCount.enabled yarn.am.memory
yarn.am.memoryOverhead yarn.am.nodeLabelExpression yarn.am.tokenConfRegex yarn.am.waitTime
yarn.applicationMaster.waitTries yarn.applicationType yarn.archive yarn.cache.confArchive
yarn.cache.filenames yarn.cache.sizes yarn.cache.timestamps yarn.cache.types yarn.cache.visibilities
yarn.client.statCache.preload.enabled yarn.client.statCache.preload.perDirectoryThreshold
yarn.clientLaunchMonitorInterval yarn.config.gatewayPath yarn.config.replacementPath
yarn.containerLauncherMaxThreads yarn.dist.archives yarn.dist.files yarn.dist.forceDownloadSchemes
yarn.dist.jars yarn.dist.pyFiles yarn.driver.memoryOverhead yarn.exclude.nodes
yarn.executor.failuresValidityInterval yarn.executor.launch.excludeOnFailure.enabled
yarn.executor.memoryOverhead yarn.executor.nodeLabelExpression yarn.executor.oomKill.enabled
yarn.historyServer.address yarn.historyServer.allowTracking yarn.includeDriverLogsLink yarn.isPython
yarn.jar yarn.jars yarn.kerberos.relogin.period yarn.kerberos.renewal.excludeHadoopFileSystems yarn.keytab
yarn.max.executor.failures yarn.max.worker.failures yarn.maxAppAttempts yarn.metrics.namespace
yarn.populateHadoopClasspath yarn.preserve.staging.files yarn.principal yarn.priority yarn.queue
yarn.report.interval yarn.report.loggingFrequency yarn.resourceFpgaDeviceName yarn.resourceGpuDeviceName
yarn.rolledLog.excludePattern yarn.rolledLog.includePattern yarn.scheduler.heartbeat.interval-ms
yarn.scheduler.initial-allocation.interval yarn.scheduler.reporterThread.maxFailures yarn.secondary.jars
yarn.shuffle.server.recovery.disabled yarn.stagingDir yarn.submit.file.replication
yarn.submit.waitAppCompletion yarn.tags yarn.unmanagedAM.enabled yarn.user.classpath.first yarn.user.jar
""".split())
